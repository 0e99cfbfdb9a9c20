//! Nomad's `Vault` block, as far as identities need it.

use crate::codec::wire_struct;

wire_struct! {
    /// A task's `vault` block (Nomad's `Vault`; Go sends the whole struct,
    /// and its other keys, `Env`, `ChangeMode` and the rest, are ignored).
    ///
    /// Nomad's servers write `Role` and `Namespace` into a Vault identity's
    /// claims (`vault_role`, `vault_namespace`; see
    /// [`IssueRequest::vault_for_claims`](crate::model::IssueRequest::vault_for_claims)),
    /// and extra-claim templates read all three as `${vault.cluster}`,
    /// `${vault.namespace}` and `${vault.role}`. Each field is empty when the
    /// job does not set it (an empty `Role` means the auth method's default
    /// role), and at most [`MAX_BLOCK_FIELD_BYTES`](crate::model::MAX_BLOCK_FIELD_BYTES)
    /// bytes.
    ///
    /// Fields are declared in codec-name order, the order Go's codec writes them.
    pub struct Vault {
        /// The Vault cluster, by the name Nomad's agent configuration gives it.
        pub cluster: String => "Cluster",
        /// The Vault (Enterprise) namespace.
        pub namespace: String => "Namespace",
        /// The role of Vault's JWT auth method the task logs in with.
        pub role: String => "Role",
    }
}
