//! The replicated keyring's SPIFFE bundle sequence, stored at
//! `<prefix>sequence` as a msgpack map (`Sequence`, uint64) and raised in
//! the transaction of every change, so that every server of one prefix
//! serves the same `spiffe_sequence` ([`crate::Keyring::spiffe_sequence`])
//! and it changes with every change of the published keys.

use super::Shared;
use super::view::{SEQUENCE, View};
use crate::codec::{self, wire_struct};
use crate::error::Result;

wire_struct! {
    /// The `sequence` record.
    pub(crate) struct SequenceRecord {
        /// The sequence of the bundle of the keys written with it.
        pub(crate) sequence: u64 => "Sequence",
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
    /// The record a change planned at `served` (the sequence the copy
    /// served then) writes: one more, so that the sequence rises with it.
    pub(crate) fn next_sequence(served: u64) -> Result<Vec<u8>> {
        codec::encode(&SequenceRecord {
            sequence: served.saturating_add(1),
        })
    }

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
