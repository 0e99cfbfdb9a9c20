//! `wid serve --etcd`: the replicated keyring as this server holds it — the
//! watched copy, the rotation candidate and the server's leased record — and,
//! with `--etcd-snapshot FILE`, a wrapped local snapshot of the last keyring
//! it applied: rewritten after every change, and served (stale, as `/health`
//! and `/metrics` say) when etcd cannot be reached at start, until it can.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use workload_identity::{
    EtcdKeyring, KeyWrapper, Keyring, KeystoreLoadOptions, RotationPolicy, Rotator, RotatorOptions,
    ServerPresence, ServerRecord,
};

use crate::CliError;
use crate::output::utc;

/// The replicated keyring of a server.
pub(super) struct Replicated {
    /// The watched copy, once etcd answered.
    live: OnceLock<EtcdKeyring>,
    /// `--etcd-snapshot`.
    pub(super) snapshot: Option<Snapshot>,
    /// The rotation candidate (`--rotator`), resigned at the stop.
    pub(super) rotator: Mutex<Option<Rotator>>,
    /// This server's leased record (`<prefix>servers/<id>`), dropped (the
    /// record deleted) at the stop.
    presence: Mutex<Option<ServerPresence>>,
    /// Where the keys live, for people.
    pub(super) prefix: String,
}

/// A wrapped local copy of the last keyring applied.
pub(super) struct Snapshot {
    pub(super) path: PathBuf,
    /// The KEK it is wrapped with (`None`: the plaintext opt-in).
    wrapper: Option<Arc<dyn KeyWrapper>>,
    /// Loaded at start because etcd did not answer: served until it does,
    /// with when it was saved and why etcd was not reached.
    pub(super) serving: Option<(Keyring, i64, String)>,
    /// The keyring generation last saved (0: none yet).
    saved: Mutex<u64>,
}

/// What a candidate and its record need, once etcd answers.
pub(super) struct Candidate {
    pub(super) rotator: bool,
    /// The election's lease TTL and keep-alive interval.
    pub(super) lease_ttl: Duration,
    pub(super) keep_alive: Duration,
    pub(super) follows_stored: bool,
    pub(super) policy: RotationPolicy,
    pub(super) address: String,
    pub(super) issuer: Option<String>,
    pub(super) started: i64,
}

impl Snapshot {
    pub(super) fn new(path: PathBuf, wrapper: Option<Arc<dyn KeyWrapper>>) -> Snapshot {
        Snapshot {
            path,
            wrapper,
            serving: None,
            saved: Mutex::new(0),
        }
    }

    /// Loads the snapshot to serve while etcd does not answer (`why`).
    pub(super) fn load(mut self, why: String) -> Result<Snapshot, CliError> {
        let mut options = KeystoreLoadOptions::default();
        if let Some(w) = &self.wrapper {
            options = options.wrapper(Arc::clone(w));
        } else {
            options = options.allow_plaintext(true);
        }
        let keyring = Keyring::load_with(&self.path, &options).map_err(|e| {
            CliError::from(e).hint(format!(
                "etcd did not answer ({why}) and the snapshot {} could not be loaded either",
                self.path.display()
            ))
        })?;
        let saved_at = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        self.serving = Some((keyring, saved_at, why));
        Ok(self)
    }

    /// Saves `live`'s keys (and policy) when they changed since the last
    /// save: wrapped by the KEK, mode 0600, replaced crash-safely.
    fn save_if_changed(&self, live: &EtcdKeyring) {
        let generation = live.keyring().generation();
        let mut saved = self.saved.lock().unwrap_or_else(PoisonError::into_inner);
        if *saved == generation || live.keyring().is_empty() {
            return;
        }
        let written = live.export().and_then(|kr| {
            kr.set_policy(live.policy())?;
            match &self.wrapper {
                Some(w) => kr.save_wrapped(&self.path, w.as_ref()),
                None => kr.save(&self.path),
            }
        });
        match written {
            Ok(()) => *saved = generation,
            Err(e) => serve_log!(
                Warn,
                "the snapshot {} could not be written: {e}",
                self.path.display()
            ),
        }
    }
}

impl Replicated {
    /// Serving `live`, the replicated keyring that answered.
    pub(super) fn live_from_start(live: EtcdKeyring, snapshot: Option<Snapshot>) -> Replicated {
        let prefix = live.prefix().to_string();
        let r = Replicated {
            live: OnceLock::new(),
            snapshot,
            rotator: Mutex::new(None),
            presence: Mutex::new(None),
            prefix,
        };
        let _ = r.live.set(live);
        r
    }

    /// Serving `snapshot` (loaded) until etcd answers.
    pub(super) fn from_snapshot(snapshot: Snapshot, prefix: String) -> Replicated {
        Replicated {
            live: OnceLock::new(),
            snapshot: Some(snapshot),
            rotator: Mutex::new(None),
            presence: Mutex::new(None),
            prefix,
        }
    }

    /// The replicated keyring, once etcd answered.
    pub(super) fn live(&self) -> Option<&EtcdKeyring> {
        self.live.get()
    }

    /// Starts the rotation candidate (with `--rotator`) and the server's
    /// record on the live keyring.
    pub(super) fn start(&self, c: &Candidate) -> Result<(), workload_identity::Error> {
        let Some(live) = self.live() else {
            return Ok(());
        };
        let rotator = if c.rotator {
            let options = if c.follows_stored {
                RotatorOptions::stored_policy()
            } else {
                RotatorOptions::new(c.policy)
            };
            Some(live.start_rotator(options.lease_ttl(c.lease_ttl).interval(c.keep_alive))?)
        } else {
            None
        };
        // The record names this process as its rotation candidate does
        // (host:pid), so `wid keyring status` can say since when the
        // elected rotator holds the election.
        let id = RotatorOptions::stored_policy().identity;
        let presence = live.announce_server(
            ServerRecord::new(&id, &c.address, c.issuer.as_deref(), c.started),
            rotator.as_ref(),
            Duration::from_secs(10),
        )?;
        *self.rotator.lock().unwrap_or_else(PoisonError::into_inner) = rotator;
        *self.presence.lock().unwrap_or_else(PoisonError::into_inner) = Some(presence);
        Ok(())
    }

    /// Takes the keyring that answered after the start: served from now on
    /// (the snapshot is no longer), its candidate and record started.
    pub(super) fn connected(&self, live: EtcdKeyring, c: &Candidate) {
        if self.live.set(live).is_err() {
            return;
        }
        serve_log!(
            Info,
            "etcd answers: serving the replicated keyring at {} (the snapshot is no longer served)",
            self.prefix
        );
        if let Err(e) = self.start(c) {
            serve_log!(
                Warn,
                "the rotation candidate or this server's record could not start: {e}"
            );
        }
    }

    /// The keys to serve while etcd has not answered since the start, and why
    /// they are stale.
    pub(super) fn stale(&self) -> Option<(Keyring, String)> {
        let s = self.snapshot.as_ref()?;
        let (keyring, saved_at, why) = s.serving.as_ref()?;
        Some((
            keyring.clone(),
            format!(
                "etcd has not answered since the start ({why}): serving the snapshot {} saved {}",
                s.path.display(),
                utc(*saved_at)
            ),
        ))
    }

    /// Writes the snapshot when the live keys changed.
    pub(super) fn save_snapshot(&self) {
        if let (Some(s), Some(live)) = (&self.snapshot, self.live()) {
            s.save_if_changed(live);
        }
    }

    /// The lead time: the live keyring's, else the snapshot's policy's.
    pub(super) fn lead_time(&self, keyring: &Keyring) -> Option<Duration> {
        match self.live() {
            Some(live) => Some(live.lead_time()),
            None => keyring.policy().map(|p| p.lead_time),
        }
    }

    /// Whether the candidate is elected (`None`: this server runs none).
    pub(super) fn rotator_elected(&self) -> Option<bool> {
        self.rotator
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(Rotator::is_elected)
    }

    /// At the stop: the record goes at once, and the lease is given up so
    /// another candidate takes over now rather than after its TTL.
    pub(super) fn stop(&self) {
        drop(
            self.presence
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        if let Some(r) = self
            .rotator
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            r.resign();
        }
    }
}

/// What a server started from its snapshot needs to reach etcd later.
pub(super) struct Retry {
    pub(super) etcd: crate::etcd_args::EtcdArgs,
    pub(super) wrapper: Option<Arc<dyn KeyWrapper>>,
    pub(super) rotation: RotationPolicy,
    pub(super) given: workload_identity::PolicyOverrides,
    pub(super) candidate: Candidate,
    pub(super) ctx: crate::output::Ctx,
}
