//! Signing identities for workloads.

use crate::claims::Claims;
use crate::error::{Error, Result};
use crate::jwt;
use crate::keyring::{KeyId, Keyring};
use crate::model::IssueRequest;

/// A signed identity: the token and what it says. `Debug` redacts the token
/// (it is a bearer credential).
#[derive(Clone, PartialEq, Eq)]
pub struct SignedIdentity {
    /// The compact JWS.
    pub token: String,
    /// Its claims.
    pub claims: Claims,
    /// The key that signed it.
    pub kid: KeyId,
}

impl std::fmt::Debug for SignedIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedIdentity")
            .field(
                "token",
                &format_args!("[redacted, {} bytes]", self.token.len()),
            )
            .field("claims", &self.claims)
            .field("kid", &self.kid)
            .finish()
    }
}

/// Signs identities with a keyring's active key.
///
/// ```
/// use workload_identity::model::{GoDuration, IssueRequest, WorkloadIdentity};
/// use workload_identity::{Issuer, Keyring};
///
/// let keyring = Keyring::new();
/// keyring.rotate(1_700_000_000)?;
/// let mut req = IssueRequest::default();
/// req.region = "global".into();
/// req.allocation.id = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc".into();
/// req.allocation.namespace = "default".into();
/// req.allocation.job_id = "web".into();
/// req.allocation.task_group = "frontend".into();
/// req.task = "server".into();
/// req.identity = WorkloadIdentity {
///     name: "vault_default".into(),
///     audience: vec!["vault.io".into()],
///     ttl: GoDuration::from_secs(3600), // nanoseconds on the wire
///     ..WorkloadIdentity::default()
/// };
/// let signed = Issuer::new(keyring)
///     .issuer("https://nomad.example.com")
///     .issue(&req, 1_700_000_000)?;
/// assert_eq!(signed.claims.subject, "global:default:web:frontend:server:vault_default");
/// assert_eq!(signed.claims.expires_at, Some(1_700_003_600));
/// # Ok::<(), workload_identity::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Issuer {
    keyring: Keyring,
    issuer: Option<String>,
}

impl Issuer {
    /// An issuer over `keyring` (shared: rotations are seen at once).
    pub fn new(keyring: Keyring) -> Issuer {
        Issuer {
            keyring,
            issuer: None,
        }
    }

    /// Sets the `iss` claim (e.g. the OIDC issuer URL, as
    /// [`VerifierBuilder::issuer`](crate::verify::VerifierBuilder::issuer)
    /// requires it). An empty string means no `iss`, as in the C ABI.
    pub fn issuer(mut self, issuer: &str) -> Issuer {
        self.issuer = (!issuer.is_empty()).then(|| issuer.to_string());
        self
    }

    /// The keyring this issuer signs with.
    pub fn keyring(&self) -> &Keyring {
        &self.keyring
    }

    /// Signs the identity `req` asks for, at `now` (Unix seconds). An invalid
    /// request is `InvalidArgument` naming every bad field; no active key is
    /// `NoActiveKey`.
    pub fn issue(&self, req: &IssueRequest, now: i64) -> Result<SignedIdentity> {
        req.validate()?;
        let workload = req.workload()?;
        let key = self.keyring.active()?;
        let claims = Claims::for_request(req, workload, now, self.issuer.as_deref());
        let json = serde_json::to_vec(&claims).map_err(|e| Error::MalformedToken {
            reason: format!("cannot encode claims: {e}"),
        })?;
        let token = jwt::encode(&key, &json);
        Ok(SignedIdentity {
            token,
            claims,
            kid: key.id().clone(),
        })
    }
}
