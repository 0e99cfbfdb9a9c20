//! The replicated keyring's manifest, stored at `<prefix>sequence`: the
//! SPIFFE bundle sequence (raised in the transaction of every change, so
//! every server of one prefix serves the same `spiffe_sequence`, see
//! [`crate::Keyring::spiffe_sequence`]) and, for a keyring whose records
//! are authenticated, the SHA-256 of every record a process follows
//! (`keys/<key id>`, `policy`) under its etcd key name, with a MAC under the
//! record key (`seal.rs`).

use std::collections::BTreeMap;

use super::Shared;
use super::view::{Digests, SEQUENCE, View};
use crate::codec::{self, Bin, wire_struct};
use crate::custody::RecordKey;
use crate::error::Result;

/// The manifest after `writes` are applied to `digests`.
pub(crate) fn apply_writes(digests: &Digests, writes: &[(String, Option<[u8; 32]>)]) -> Digests {
    let mut out = digests.clone();
    for (name, d) in writes {
        match d {
            Some(d) => {
                out.insert(name.clone(), *d);
            }
            None => {
                out.remove(name);
            }
        }
    }
    out
}

wire_struct! {
    /// The `sequence` record.
    pub(crate) struct SequenceRecord {
        /// HMAC-SHA256 under the record key of the record with `MAC` empty
        /// (empty for a keyring whose records are not authenticated).
        pub(crate) mac: Bin => "MAC",
        /// Each authenticated record's SHA-256, by its name under the prefix.
        pub(crate) records: BTreeMap<String, Bin> => "Records",
        /// The sequence of the bundle of the keys written with it.
        pub(crate) sequence: u64 => "Sequence",
    }
}

impl SequenceRecord {
    /// The bytes its MAC covers: the record with `MAC` empty.
    fn unsealed_bytes(&self) -> Result<Vec<u8>> {
        codec::encode(&SequenceRecord {
            mac: Bin::default(),
            records: self.records.clone(),
            sequence: self.sequence,
        })
    }

    /// The record for `sequence` and `records`, sealed by `key` (or, for a
    /// keyring without one, listing nothing).
    pub(crate) fn encode(
        sequence: u64,
        records: &Digests,
        key: Option<&RecordKey>,
    ) -> Result<Vec<u8>> {
        let Some(key) = key else {
            return codec::encode(&SequenceRecord {
                sequence,
                ..SequenceRecord::default()
            });
        };
        let mut record = SequenceRecord {
            mac: Bin::default(),
            records: records
                .iter()
                .map(|(name, d)| (name.clone(), Bin::new(d.to_vec())))
                .collect(),
            sequence,
        };
        record.mac = Bin::new(key.mac(SEQUENCE, &record.unsealed_bytes()?));
        codec::encode(&record)
    }

    /// Whether `key` made this record's MAC.
    pub(crate) fn verify(&self, key: &RecordKey) -> bool {
        self.unsealed_bytes()
            .is_ok_and(|bytes| key.verify(SEQUENCE, &bytes, self.mac.as_slice()))
    }

    /// The digests listed (a digest that is not 32 bytes is listed as none).
    pub(crate) fn digests(&self) -> Digests {
        self.records
            .iter()
            .filter_map(|(name, d)| {
                let d: [u8; 32] = d.as_slice().try_into().ok()?;
                Some((name.clone(), d))
            })
            .collect()
    }
}

/// The stored sequence of the copy: `Err` for a record that does not decode
/// (reported, and the sequence held before kept).
pub(crate) fn stored(view: &View) -> std::result::Result<Option<u64>, String> {
    match view.entries.get(SEQUENCE) {
        None => Ok(None),
        Some(e) => codec::decode::<SequenceRecord>(&e.value)
            .map(|r| Some(r.sequence))
            .map_err(|_| "does not decode as a sequence record (a map with Sequence)".into()),
    }
}

impl Shared {
    /// Takes the copy's `sequence` record into the keyring (after its keys
    /// and policy): the sequence it serves.
    pub(crate) fn adopt_sequence(&self, view: &View, problems: &mut Vec<String>) {
        match stored(view) {
            Ok(s) => self.keyring.adopt_sequence(s),
            Err(why) => problems.push(format!(
                "the sequence record at {}{SEQUENCE} {why}; the sequence held before is kept",
                self.prefix
            )),
        }
    }
}
