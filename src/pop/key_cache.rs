//! Checked workload keys, by their public key: a workload proves many
//! requests with one key, so its key is parsed and checked (and, for Ed25519,
//! its verification table built) once, not per proof.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Error, Result};
use crate::keyring::{Checker, proof_key_checker};
use crate::model::ProofKey;

/// A bounded map from a `cnf.jwk` to its checker; first in, first out.
pub(crate) struct KeyCache {
    inner: Mutex<Inner>,
    capacity: usize,
}

#[derive(Default)]
struct Inner {
    map: HashMap<Box<str>, Arc<Checker>>,
    order: VecDeque<Box<str>>,
}

/// Every member, so two keys share an entry only when they are the same key.
fn cache_key(key: &ProofKey) -> Box<str> {
    format!(
        "{}\n{}\n{}\n{}\n{}",
        key.kty, key.crv, key.alg, key.x, key.y
    )
    .into()
}

impl KeyCache {
    pub(crate) fn new(capacity: usize) -> KeyCache {
        KeyCache {
            inner: Mutex::new(Inner::default()),
            capacity: capacity.max(1),
        }
    }

    /// The checker for `key`, checking it first if it is new; a key that is
    /// not a usable Ed25519 or P-256 public key is `ProofInvalid`.
    pub(crate) fn get(&self, key: &ProofKey) -> Result<Arc<Checker>> {
        let id = cache_key(key);
        if let Some(c) = self.lock().map.get(&id) {
            return Ok(c.clone());
        }
        let checker = Arc::new(
            proof_key_checker(key, "the WIT's cnf.jwk")
                .map_err(|reason| Error::ProofInvalid { reason })?,
        );
        let mut inner = self.lock();
        if inner.map.len() >= self.capacity {
            if let Some(old) = inner.order.pop_front() {
                inner.map.remove(&old);
            }
        }
        if inner.map.insert(id.clone(), checker.clone()).is_none() {
            inner.order.push_back(id);
        }
        Ok(checker)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
