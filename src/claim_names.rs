//! The names of the claims the issuer writes, below the keyring (its OIDC
//! discovery document lists them) and the claim set (which writes them).

/// Every claim an [`Issuer`](crate::Issuer) writes, in the order a token
/// carries them: the allocation's (`nomad_*`, the exchanges'), the node's
/// (node identities), the registered ones, `extra_claims` (an object of the
/// policy's extra claims) and `cnf` (a WIT's workload key). The OIDC
/// discovery document lists them as `claims_supported`.
pub const CLAIMS_SUPPORTED: &[&str] = &[
    "nomad_namespace",
    "nomad_job_id",
    "nomad_allocation_id",
    "nomad_task",
    "nomad_service",
    "consul_namespace",
    "vault_namespace",
    "vault_role",
    "nomad_node_id",
    "nomad_node_datacenter",
    "nomad_node_pool",
    "nomad_node_class",
    "sub",
    "aud",
    "iat",
    "nbf",
    "exp",
    "jti",
    "iss",
    "extra_claims",
    "cnf",
];
