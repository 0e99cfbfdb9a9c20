//! The rules of the pipeline (see [`Verifier`]): finding the key (waiting for
//! one a replica has not seen yet), the algorithm and signature checks, and
//! the claims: times, audience, issuer, and the allocation's liveness in the
//! state store.

use super::*;

impl Verifier {
    pub(super) fn key(&self, kid: &str, waits: &mut KeyWait) -> Result<VerifyingHandle> {
        waits.find(&self.inner.keyring, kid, || {
            bump(&self.inner.counters.key_waits);
            log::debug!("waiting for unknown key {kid:?}");
        })
    }

    pub(super) fn check_claims(&self, c: &Claims, now: i64) -> Result<()> {
        self.check_kind(c)?;
        self.check_spiffe_subject(c)?;
        self.check_times(c, now)?;
        self.check_audience(c)?;
        self.check_issuer(c)
    }

    /// A WIT's claims: as a bearer token's, but no audience is expected (a
    /// WIT has none; the WPT's `aud` names the request's target instead).
    pub(super) fn check_wit_claims(&self, c: &Claims, now: i64) -> Result<()> {
        self.check_kind(c)?;
        self.check_times(c, now)?;
        self.check_issuer(c)
    }

    /// The token is one kind (allocation or node identity), names what it
    /// binds to, and is of a kind this verifier accepts.
    pub(super) fn check_kind(&self, c: &Claims) -> Result<()> {
        if self.inner.options.foreign {
            return self.check_foreign_subject(c);
        }
        let accept = self.inner.options.node_tokens;
        match &c.node {
            Some(node) => {
                if !(c.allocation_id.is_empty()
                    && c.namespace.is_empty()
                    && c.job_id.is_empty()
                    && c.task.is_none()
                    && c.service.is_none())
                {
                    return Err(Error::MalformedToken {
                        reason: "the token carries both node claims (nomad_node_*) and allocation claims (nomad_allocation_id, ...): it is neither a node nor an allocation identity".into(),
                    });
                }
                if node.node_id.is_empty() {
                    return Err(Error::MalformedToken {
                        reason: "the node token has no nomad_node_id claim".into(),
                    });
                }
                if c.expires_at.is_none() {
                    return Err(Error::MalformedToken {
                        reason: "the node token has no exp: a node identity must expire".into(),
                    });
                }
                if accept == NodeTokens::Refuse {
                    return Err(Error::TokenKindRefused {
                        reason: format!(
                            "node {:?}'s identity token (it carries nomad_node_id), but this verifier accepts allocation identity tokens only (VerifierBuilder::node_tokens)",
                            truncate_for_message(&node.node_id)
                        ),
                    });
                }
            }
            None => {
                if c.allocation_id.is_empty() {
                    return Err(Error::MalformedToken {
                        reason: "the token has no nomad_allocation_id claim".into(),
                    });
                }
                if accept == NodeTokens::Only {
                    return Err(Error::TokenKindRefused {
                        reason: format!(
                            "allocation {:?}'s identity token, but this verifier accepts node identity tokens only (VerifierBuilder::node_tokens)",
                            truncate_for_message(&c.allocation_id)
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// `exp`, `nbf` and `iat` within the leeway
    /// (compared in 128 bits: a signed token's times may be anywhere in i64,
    /// and no sum of two of them overflows or saturates there).
    pub(super) fn check_times(&self, c: &Claims, now: i64) -> Result<()> {
        let o = &self.inner.options;
        let leeway = o.leeway_secs;
        let leeway_secs = leeway as u64;
        match c.expires_at {
            Some(exp) if wide(now) >= wide(exp) + wide(leeway) => {
                return Err(Error::Expired {
                    exp,
                    now,
                    leeway_secs,
                });
            }
            None if o.require_exp => {
                return Err(Error::MalformedToken {
                    reason: "the required claim exp is missing: the token never expires, and this verifier requires tokens that do (require_exp)".into(),
                });
            }
            _ => {}
        }
        for (claim, value) in [("nbf", c.not_before), ("iat", c.issued_at)] {
            if let Some(v) = value {
                if wide(v) > wide(now) + wide(leeway) {
                    return Err(Error::NotYetValid {
                        claim,
                        value: v,
                        now,
                        leeway_secs,
                    });
                }
            }
        }
        Ok(())
    }

    pub(super) fn check_audience(&self, c: &Claims) -> Result<()> {
        let aud = self.inner.audience.as_str();
        if !c.audience.iter().any(|a| a == aud) {
            return Err(Error::AudienceMismatch {
                expected: aud.to_string(),
                found: c.audience.iter().map(|a| truncate_for_message(a)).collect(),
            });
        }
        Ok(())
    }

    pub(super) fn check_issuer(&self, c: &Claims) -> Result<()> {
        if let Some(want) = &self.inner.options.issuer {
            if c.issuer.as_deref() != Some(want.as_str()) {
                let found = match c.issuer.as_deref() {
                    Some(iss) => format!("{:?}", truncate_for_message(iss)),
                    None => "no iss".to_string(),
                };
                return Err(Error::IssuerMismatch {
                    expected: want.clone(),
                    found,
                });
            }
        }
        Ok(())
    }

    /// What the token binds to is live: its node for a node token, else
    /// its allocation ([`Verifier::check_kind`] ran first).
    pub(super) fn check_bound(&self, c: &Claims) -> Result<()> {
        if self.inner.options.foreign {
            // A foreign token binds to nothing in our state store.
            return Ok(());
        }
        match &c.node {
            Some(node) => self.check_node(&node.node_id),
            None => self.check_allocation(&c.allocation_id),
        }
    }

    /// The node is live: read `Stale`, and `Consistent` only on missing, as
    /// allocations are; a store error fails closed.
    pub(super) fn check_node(&self, node_id: &str) -> Result<()> {
        let store = &self.inner.store;
        let unavailable = |e: crate::state::StoreError| Error::NodeStoreUnavailable {
            node_id: truncate_for_message(node_id),
            cause: e.message,
        };
        let state = match store
            .node_state(node_id, Consistency::Stale)
            .map_err(unavailable)?
        {
            NodeState::Missing => {
                bump(&self.inner.counters.consistent_fallbacks);
                log::debug!("node {node_id:?} missing from a stale read; reading consistently");
                store
                    .node_state(node_id, Consistency::Consistent)
                    .map_err(unavailable)?
            }
            other => other,
        };
        match state {
            NodeState::Live => Ok(()),
            NodeState::Down => Err(Error::NodeDown {
                node_id: truncate_for_message(node_id),
            }),
            NodeState::Missing => Err(Error::NodeNotFound {
                node_id: truncate_for_message(node_id),
            }),
        }
    }

    pub(super) fn check_allocation(&self, alloc_id: &str) -> Result<()> {
        let store = &self.inner.store;
        let unavailable = |e: crate::state::StoreError| Error::StoreUnavailable {
            alloc_id: truncate_for_message(alloc_id),
            cause: e.message,
        };
        let state = match store
            .allocation_state(alloc_id, Consistency::Stale)
            .map_err(unavailable)?
        {
            AllocState::Missing => {
                bump(&self.inner.counters.consistent_fallbacks);
                log::debug!(
                    "allocation {alloc_id:?} missing from a stale read; reading consistently"
                );
                store
                    .allocation_state(alloc_id, Consistency::Consistent)
                    .map_err(unavailable)?
            }
            other => other,
        };
        match state {
            AllocState::Live => Ok(()),
            AllocState::Terminal => Err(Error::AllocationTerminal {
                alloc_id: truncate_for_message(alloc_id),
                detail: store
                    .terminal_detail(alloc_id)
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default(),
            }),
            AllocState::Missing => Err(Error::AllocationNotFound {
                alloc_id: truncate_for_message(alloc_id),
            }),
        }
    }
}

/// Checks only a token's form, key and signature against `keyring` (no time,
/// audience or allocation checks, no waiting for keys): for a client deciding
/// whether a saved token is still usable after a restart.
pub(crate) fn check_signature(keyring: &Keyring, token: &str) -> Result<Claims> {
    let parsed = jwt::parse(token.as_bytes(), jwt::DEFAULT_MAX_TOKEN_BYTES)?;
    let key = KeyWait::new(Duration::ZERO).find(keyring, parsed.kid.as_str(), || {})?;
    // A saved WIT is usable only if a WIT key signed it (one signed before
    // keys had purposes, by a bearer key, is re-signed), a bearer token only
    // if a bearer key did.
    match parsed.typ {
        jwt::TokenType::Wit => check_wit_key(&key)?,
        _ => check_bearer_key(&key)?,
    }
    check_alg(&key, &parsed)?;
    check_sig(&key, &parsed)?;
    decode_claims(&parsed.payload)
}

/// The claims of a well-formed token, without checking its signature or
/// anything else: for a client checking that what a signer returned is what it
/// asked for (the signature is the relying party's to check).
pub(crate) fn decode_unverified(token: &str) -> Result<Claims> {
    let parsed = jwt::parse(token.as_bytes(), jwt::DEFAULT_MAX_TOKEN_BYTES)?;
    decode_claims(&parsed.payload)
}

/// How one call waits for unknown kids: every wait ends at one deadline, set
/// when the first wait starts, so a batch of any size waits at most `wait` in
/// all. A wait that ends without the key ends at that deadline, so no kid (the
/// same or another) is waited for again in the call.
pub(crate) struct KeyWait {
    wait: Duration,
    deadline: Option<Instant>,
}

impl KeyWait {
    pub(crate) fn new(wait: Duration) -> KeyWait {
        KeyWait {
            wait,
            deadline: None,
        }
    }

    /// The key `kid` if it verifies. A deprecated key is refused at once; a key
    /// the keyring has never seen is waited for until the shared deadline
    /// (`on_wait` runs first). `kid` is a well-formed key ID (the parser
    /// refuses any other at once).
    pub(super) fn find(
        &mut self,
        keyring: &Keyring,
        kid: &str,
        on_wait: impl FnOnce(),
    ) -> Result<VerifyingHandle> {
        if let Some(k) = keyring.verifying_key(kid) {
            return Ok(k);
        }
        let unknown = |reason: String| Error::UnknownKey {
            kid: truncate_for_message(kid),
            reason,
        };
        if let Some(info) = keyring.key_info(kid) {
            // Present but not verifying: only deprecated keys are.
            debug_assert_eq!(info.state, KeyState::Deprecated);
            return Err(unknown("the key is deprecated".into()));
        }
        keyring.notify_unknown_key(kid);
        let wait = self.wait;
        if wait.is_zero() {
            return Err(unknown("not in the keyring".into()));
        }
        let after = || unknown(format!("not in the keyring after waiting up to {wait:?}"));
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(after());
        }
        on_wait();
        let deadline = *self
            .deadline
            .get_or_insert_with(|| crate::deadline::deadline_after(wait));
        keyring.wait_for_key_until(kid, deadline).ok_or_else(after)
    }
}

/// Only a bearer key verifies a bearer token: a WIT key's signature is never
/// accepted by `verify`, whatever the token's `typ` says (a WIT key's tokens
/// are shown to every service their workload calls).
pub(super) fn check_bearer_key(key: &VerifyingHandle) -> Result<()> {
    if key.purpose() != KeyPurpose::Bearer {
        // The refusal alone reads which purpose it was: the accepted path
        // (every token verified) makes one comparison.
        let reason = match key.purpose() {
            KeyPurpose::Kubernetes => format!(
                "key {} is a kubernetes key: it signs only Kubernetes service-account tokens, which verify against the cluster issuer's key set (wid keyring jwks --purpose kubernetes), never as workload identities; bearer keys are the JWKS's",
                key.id()
            ),
            other => format!(
                "key {} is a {other} key: it signs only {}, which verify only with a proof (verify_proof), never as bearer tokens; bearer keys are the JWKS's",
                key.id(),
                other.signs()
            ),
        };
        return Err(Error::UnknownKey {
            kid: key.id().to_string(),
            reason,
        });
    }
    Ok(())
}

/// Only a WIT key verifies a WIT (`verify_proof`): a bearer key's tokens are
/// no workload identity tokens, whatever their `typ` says.
pub(super) fn check_wit_key(key: &VerifyingHandle) -> Result<()> {
    if key.purpose() != KeyPurpose::Wit {
        return Err(Error::UnknownKey {
            kid: key.id().to_string(),
            reason: format!(
                "key {} is a {} key, not a WIT key: a WIT must be signed by a key made for WITs (published in the WIT key set, wid keyring jwks --purpose wit), never by a key of the JWKS",
                key.id(),
                key.purpose()
            ),
        });
    }
    Ok(())
}

/// A WIT is never a bearer token.
pub(super) fn check_bearer(parsed: &jwt::Parsed<'_>) -> Result<()> {
    if parsed.typ == jwt::TokenType::Wit {
        return Err(Error::ProofRequired {
            reason: "the token is a workload identity token (typ wit+jwt), never accepted as a bearer token: present it with a workload proof token (verify_proof)".into(),
        });
    }
    Ok(())
}

pub(super) fn bad_signature(key: &VerifyingHandle) -> Error {
    Error::BadSignature {
        kid: key.id().to_string(),
    }
}

/// The header's `alg` must be the algorithm of the key its `kid` names (no
/// key ever checks a signature of another algorithm: not PS256 under an RS256
/// key of the same modulus, not ES384 under a P-256 key), and then the
/// signature must have the key's size: 64 bytes for EdDSA and ES256 (`r ||
/// s`), 96 for ES384, 132 for ES512, the modulus size for RSA.
pub(super) fn check_alg(key: &VerifyingHandle, parsed: &jwt::Parsed<'_>) -> Result<()> {
    let alg = key.algorithm();
    if parsed.alg != alg {
        return Err(Error::UnsupportedAlgorithm {
            alg: parsed.alg.name().to_string(),
            expected: format!("\"{alg}\", the algorithm of key {}", key.id()),
        });
    }
    let (want, what) = match key.public_key() {
        PublicKey::Rsa { n } | PublicKey::RsaVerifyOnly { n, .. } => (
            n.len(),
            format!("an {alg} signature under this key (its modulus size)"),
        ),
        PublicKey::P256 { .. } => (64, "an ES256 signature (r || s)".into()),
        PublicKey::P384 { .. } => (96, "an ES384 signature (r || s, never DER)".into()),
        PublicKey::P521 { .. } => (132, "an ES512 signature (r || s, never DER)".into()),
        _ => (64, "an Ed25519 signature".into()),
    };
    let got = parsed.signature.as_slice().len();
    if got != want {
        return Err(Error::MalformedToken {
            reason: format!("{what} is {want} bytes, got {got}"),
        });
    }
    Ok(())
}

/// The strict signature check of a parsed token under `key` (whose algorithm
/// [`check_alg`] has matched to the header's).
pub(super) fn check_sig(key: &VerifyingHandle, parsed: &jwt::Parsed<'_>) -> Result<()> {
    if key.verify(parsed.signing_input, parsed.signature.as_slice()) {
        Ok(())
    } else {
        Err(bad_signature(key))
    }
}

pub(crate) fn decode_claims(payload: &[u8]) -> Result<Claims> {
    Claims::from_payload(payload).map_err(|e| Error::MalformedToken {
        reason: format!("claims are not a valid claims object: {e}"),
    })
}
