//! The Rust side of the PyJWT proof-of-possession interop check
//! (`tests/python/pyjwt_interop.py`, section f; run by
//! `scripts/pyjwt-interop.sh`). A co-process: it reads one JSON request per
//! line on stdin and answers each with one JSON line on stdout, so Python can
//! both check what we make and hand us what it makes.
//!
//! Its world: a keyring with one active key per algorithm (made here), an
//! issuer with trust domain `nomad.example.com` and `iss`
//! `https://nomad.example.com`, a memory store in which the sample task's
//! allocation is live, and a verifier for audience `vault.io`. Times are the
//! real clock (PyJWT checks `exp` against it).
//!
//! ```text
//! {"op":"emit","key":"EdDSA"|"ES256","signer":"EdDSA"|"ES256"|"RS256","target":URI}
//!   -> {"wit":..,"wpt":..,"jwks":..,"wit_jwks":..,"target":..,"now":..}
//!      a WIT for a fresh WorkloadKey, signed by the keyring's `signer` key,
//!      one WPT for `target` made with that workload key, and the JWKS
//! {"op":"jwks"} -> {"jwks":..,"wit_jwks":..}   the JWKS and the WIT key set
//! {"op":"issue","jwk":{"kty":..,"crv":..,"x":..,"y":..,"alg":..},"signer":ALG}
//!   -> {"wit":..}   a WIT whose cnf.jwk is the caller's public key
//! {"op":"verify_proof","wit":..,"wpt":..,"target":..}
//!   -> {"ok":true,"jti":..,"sub":..,"expires_at":..}
//!    | {"ok":false,"code":"WID_RESULT_PROOF_INVALID",..,"error":..}
//! a request it cannot carry out -> {"fault":..}
//! ```

use std::io::{BufRead, Write};
use std::sync::Arc;

use serde_json::{Value, json};
use workload_identity::model::{Allocation, GoDuration, IssueRequest, ProofKey, WorkloadIdentity};
use workload_identity::{
    Algorithm, Audience, Issuer, KeyPurpose, Keyring, MemoryStore, ProofOptions, ProofRequest,
    Verifier, WorkloadKey, unix_now,
};

const ISS: &str = "https://nomad.example.com";
const TRUST_DOMAIN: &str = "nomad.example.com";
const ALLOC: &str = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc";

struct World {
    keyring: Keyring,
    issuer: Issuer,
    verifier: Verifier,
}

fn request(proof_key: ProofKey) -> IssueRequest {
    IssueRequest {
        region: "global".into(),
        allocation: Allocation {
            id: ALLOC.into(),
            namespace: "default".into(),
            job_id: "web".into(),
            task_group: "frontend".into(),
            desired_status: "run".into(),
            client_status: "running".into(),
            ..Allocation::default()
        },
        task: "server".into(),
        service: String::new(),
        proof_key: Some(proof_key),
        node: None,
        vault: None,
        consul: None,
        identity: WorkloadIdentity {
            name: "vault_default".into(),
            audience: vec!["vault.io".into()],
            ttl: GoDuration::from_secs(3600),
            ..WorkloadIdentity::default()
        },
    }
}

fn world() -> Result<World, String> {
    let now = unix_now();
    let keyring = Keyring::new();
    for alg in [Algorithm::EdDsa, Algorithm::Es256, Algorithm::Rs256] {
        keyring
            .rotate_alg(alg, now - 10)
            .map_err(|e| format!("rotate {alg}: {e}"))?;
        // WITs are signed only by WIT keys, published apart.
        keyring
            .rotate_purpose(KeyPurpose::Wit, alg, now - 10)
            .map_err(|e| format!("rotate WIT {alg}: {e}"))?;
    }
    let issuer = Issuer::new(keyring.clone())
        .issuer(ISS)
        .trust_domain(TRUST_DOMAIN)
        .map_err(|e| e.to_string())?;
    let store = Arc::new(MemoryStore::new());
    store.upsert(&request(ProofKey::default()).allocation);
    let audience = Audience::new("vault.io").map_err(|e| e.to_string())?;
    let verifier = Verifier::builder(keyring.clone(), store, audience)
        .issuer(ISS)
        .build();
    Ok(World {
        keyring,
        issuer,
        verifier,
    })
}

fn field<'a>(req: &'a Value, name: &str) -> Result<&'a str, String> {
    req.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("the request has no string {name:?}"))
}

fn alg(req: &Value, name: &str) -> Result<Algorithm, String> {
    let s = field(req, name)?;
    Algorithm::from_name(s).ok_or_else(|| format!("{name} {s:?} is not EdDSA, ES256 or RS256"))
}

fn handle(w: &World, req: &Value) -> Result<Value, String> {
    let now = unix_now();
    match field(req, "op")? {
        "emit" => {
            let key = WorkloadKey::generate(alg(req, "key")?).map_err(|e| e.to_string())?;
            let target = field(req, "target")?;
            let wit = w
                .issuer
                .issue_with(alg(req, "signer")?, &request(key.proof_key().clone()), now)
                .map_err(|e| e.to_string())?
                .token;
            let wpt = key
                .prove(&wit, target, now, &ProofOptions::new())
                .map_err(|e| e.to_string())?;
            Ok(json!({
                "wit": wit,
                "wpt": wpt,
                "jwks": w.keyring.jwks().to_json(),
                "wit_jwks": w.keyring.jwks_for(KeyPurpose::Wit).to_json(),
                "target": target,
                "now": now,
            }))
        }
        "jwks" => Ok(json!({
            "jwks": w.keyring.jwks().to_json(),
            "wit_jwks": w.keyring.jwks_for(KeyPurpose::Wit).to_json(),
        })),
        "issue" => {
            let jwk = req.get("jwk").ok_or("the request has no jwk")?;
            let part = |k: &str| jwk.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let proof_key = ProofKey {
                alg: part("alg"),
                crv: part("crv"),
                kty: part("kty"),
                x: part("x"),
                y: part("y"),
            };
            let wit = w
                .issuer
                .issue_with(alg(req, "signer")?, &request(proof_key), now)
                .map_err(|e| e.to_string())?
                .token;
            Ok(json!({ "wit": wit }))
        }
        "verify_proof" => {
            let request = ProofRequest::new(field(req, "target")?);
            match w
                .verifier
                .verify_proof(field(req, "wit")?, field(req, "wpt")?, &request, now)
            {
                Ok(p) => Ok(json!({
                    "ok": true,
                    "jti": p.jti,
                    "sub": p.identity.claims.subject,
                    "expires_at": p.expires_at,
                })),
                Err(e) => Ok(json!({
                    "ok": false,
                    "code": e.code().name(),
                    "error": e.to_string(),
                })),
            }
        }
        other => Err(format!("unknown op {other:?}")),
    }
}

fn main() {
    let w = match world() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("pop_interop: {e}");
            std::process::exit(2);
        }
    };
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let reply = serde_json::from_str::<Value>(&line)
            .map_err(|e| format!("not JSON: {e}"))
            .and_then(|req| handle(&w, &req))
            .unwrap_or_else(|e| json!({ "fault": e }));
        if writeln!(out, "{reply}").and_then(|()| out.flush()).is_err() {
            break;
        }
    }
}
