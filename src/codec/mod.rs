//! msgpack encoding and decoding of wire types, by declared codec names only.
//!
//! # The rule: one declared name per field, for msgpack and nothing else
//!
//! Nomad learnt (seed 002) that a msgpack library which falls back to JSON tags
//! silently changes the wire format when someone renames a field for JSON — its
//! `ConsulExposeConfig` is `Paths` on the wire and `Path` in JSON. Here the leak
//! cannot be written by accident:
//!
//! * Wire types are declared only through the crate-private `wire_struct!`
//!   macro. Every field must state its codec name (`pub paths: Vec<P> => "Paths"`),
//!   and the macro accepts doc comments and nothing else on fields or on the type —
//!   a `#[serde(rename = ...)]` added "for JSON" does not compile.
//! * JSON is never produced from a wire type. Where a JSON form is needed it is a
//!   separate view type with its own names and `From` conversions (see
//!   [`crate::model::json`]), so a JSON rename has nowhere to reach msgpack from.
//! * [`WireType::CODEC_NAMES`] lists the declared names, and the tests check
//!   that every wire type encodes exactly those keys, in declaration order.
//!
//! # Decoding is strict
//!
//! Before serde builds anything, a structural pass (the private `scan` module) checks the whole
//! input: it must be exactly one msgpack value (trailing bytes are an error), no
//! larger than [`DecodeLimits::max_bytes`] (default 4 MiB), nested no deeper than
//! [`DecodeLimits::max_depth`] (default 32; the top-level map is depth 1), and no
//! length prefix may claim more elements than the remaining bytes could hold. Then:
//!
//! * wire types must be maps (a struct sent as an array is rejected, never
//!   matched by position);
//! * unknown keys are ignored, because Go sends whole structs;
//! * a missing key or a msgpack `nil` takes the Go zero value, as Go's decoder
//!   does (Go encodes a nil slice or pointer as `nil`);
//! * a duplicated key is an error;
//! * errors name the wire type and the field path by codec names.
//!
//! # Encoding matches Go byte for byte
//!
//! Encoding writes maps keyed by codec names in declaration order (Go's struct
//! field order) with the smallest integer form (as Go does), and strings in the old
//! spec's raw form that Nomad's `MsgpackHandle` (`WriteExt: false`) writes: a string
//! of 32–255 bytes gets a `str16` header, not `str8`. The one remaining difference
//! is that an empty list or map is written as an empty array or map, where Go
//! writes `nil` for a nil slice or map; Go decodes both to an empty one.

mod scan;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{DecodeError, Error, Result};

/// A type with a msgpack wire form shared with Go, declared with codec names.
///
/// Implemented only through the crate's `wire_struct!` macro.
pub trait WireType: Serialize + DeserializeOwned {
    /// The Go struct's name, used in error messages.
    const TYPE_NAME: &'static str;
    /// The declared codec names of the fields, in wire order.
    const CODEC_NAMES: &'static [&'static str];
}

/// Bounds applied to every decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecodeLimits {
    /// Largest accepted input, in bytes (default 4 MiB: a whole Nomad allocation
    /// with its job fits with room to spare).
    pub max_bytes: usize,
    /// Deepest accepted nesting of maps and arrays; the top-level map is depth 1
    /// (default 32).
    pub max_depth: usize,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits {
            max_bytes: 4 << 20,
            max_depth: 32,
        }
    }
}

impl DecodeLimits {
    /// Sets the largest accepted input, in bytes.
    pub fn max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// Sets the deepest accepted nesting.
    pub fn max_depth(mut self, max_depth: usize) -> Self {
        self.max_depth = max_depth;
        self
    }

    /// No bounds: for re-reading bytes this library just produced.
    pub(crate) fn unlimited() -> Self {
        DecodeLimits {
            max_bytes: usize::MAX,
            max_depth: usize::MAX,
        }
    }
}

/// Encodes a wire type as a msgpack map keyed by its codec names, in the form
/// Go's `MsgpackHandle{RawToString: true}` writes.
pub fn encode<T: WireType>(value: &T) -> Result<Vec<u8>> {
    let fail = |reason: String| {
        Error::Decode(DecodeError {
            type_name: T::TYPE_NAME,
            path: String::new(),
            reason: format!("cannot encode: {reason}"),
        })
    };
    let named = rmp_serde::to_vec_named(value).map_err(|e| fail(e.to_string()))?;
    scan::downgrade_str8(&named).map_err(|e| fail(e.reason))
}

/// Decodes a wire type from msgpack with the default [`DecodeLimits`].
pub fn decode<T: WireType>(input: &[u8]) -> Result<T> {
    decode_with(input, &DecodeLimits::default())
}

/// Decodes a wire type from msgpack within `limits`.
///
/// Returns the whole value or an error naming the type and field: never a partial
/// value, never a panic, and nothing is allocated from a length the input cannot
/// back.
pub fn decode_with<T: WireType>(input: &[u8], limits: &DecodeLimits) -> Result<T> {
    scan::check(input, limits).map_err(|e| {
        Error::Decode(DecodeError {
            type_name: T::TYPE_NAME,
            path: String::new(),
            reason: format!("{} (at byte {})", e.reason, e.offset),
        })
    })?;
    let deserializer = || {
        let mut de = rmp_serde::Deserializer::from_read_ref(input);
        // The scan already bounded the depth; this keeps serde's own guard in
        // step.
        de.set_max_depth(limits.max_depth.saturating_add(1));
        de
    };
    // Decoded plainly first: tracking the path of every field costs as much
    // as the decoding itself (a fifth of a C ABI `wid_issue`). Only input
    // that fails is decoded again, tracked, for the error's path; decoding
    // is deterministic, so it fails there the same way.
    if let Ok(value) = T::deserialize(&mut deserializer()) {
        return Ok(value);
    }
    let tracked = serde_path_to_error::deserialize::<_, T>(&mut deserializer());
    tracked.map_err(|e| {
        let path = e.path().to_string();
        Error::Decode(DecodeError {
            type_name: T::TYPE_NAME,
            path: if path == "." { String::new() } else { path },
            reason: e.into_inner().to_string(),
        })
    })
}

/// Deserializes msgpack `nil` as the Go zero value (`Default`).
#[doc(hidden)]
pub fn nil_as_default<'de, D, T>(deserializer: D) -> std::result::Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de> + Default,
{
    Ok(<Option<T> as serde::Deserialize>::deserialize(deserializer)?.unwrap_or_default())
}

/// Declares a wire type: a struct whose every field states its msgpack codec name.
///
/// Only doc comments are accepted as attributes, so no serde attribute (and so no
/// JSON-motivated rename) can be attached. The generated `Deserialize` accepts a
/// map only; missing keys and `nil` take the field's `Default`, unknown keys are
/// skipped.
macro_rules! wire_struct {
    (
        $(#[doc = $doc:literal])*
        $vis:vis struct $name:ident {
            $(
                $(#[$fattr:meta])*
                $fvis:vis $field:ident : $ty:ty => $codec:literal
            ),* $(,)?
        }
    ) => {
        $(#[doc = $doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
        $vis struct $name {
            $(
                $(#[$fattr])*
                #[serde(rename = $codec)]
                $fvis $field: $ty,
            )*
        }

        const _: () = {
            /// The same fields, deserialized by serde's derive from a map only.
            #[derive(Default, serde::Deserialize)]
            #[serde(default)]
            struct Fields {
                $(
                    #[serde(rename = $codec, deserialize_with = "crate::codec::nil_as_default")]
                    $field: $ty,
                )*
            }

            struct MapOnly;

            impl<'de> serde::de::Visitor<'de> for MapOnly {
                type Value = $name;

                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    write!(f, "a map of {} fields by codec name", stringify!($name))
                }

                fn visit_map<A>(self, map: A) -> std::result::Result<$name, A::Error>
                where
                    A: serde::de::MapAccess<'de>,
                {
                    let fields: Fields = serde::Deserialize::deserialize(
                        serde::de::value::MapAccessDeserializer::new(map),
                    )?;
                    Ok($name { $($field: fields.$field),* })
                }
            }

            impl<'de> serde::Deserialize<'de> for $name {
                fn deserialize<D>(deserializer: D) -> std::result::Result<Self, D::Error>
                where
                    D: serde::Deserializer<'de>,
                {
                    deserializer.deserialize_map(MapOnly)
                }
            }

            impl $crate::codec::WireType for $name {
                const TYPE_NAME: &'static str = stringify!($name);
                const CODEC_NAMES: &'static [&'static str] = &[$($codec),*];
            }
        };
    };
}
pub(crate) use wire_struct;

/// Bytes on the wire as msgpack `bin`; zeroized on drop (they may be secret).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Bin(pub zeroize::Zeroizing<Vec<u8>>);

impl Bin {
    /// Wraps bytes.
    pub fn new(bytes: Vec<u8>) -> Bin {
        Bin(zeroize::Zeroizing::new(bytes))
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Bin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bin({} bytes)", self.0.len())
    }
}

impl Serialize for Bin {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Bin {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Bin, D::Error> {
        struct BinVisitor;
        impl serde::de::Visitor<'_> for BinVisitor {
            type Value = Bin;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("msgpack bin bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> std::result::Result<Bin, E> {
                Ok(Bin::new(v.to_vec()))
            }
        }
        d.deserialize_bytes(BinVisitor)
    }
}

/// Encodes like [`encode`] into buffers that are zeroized when dropped, sized up
/// front from `capacity_hint` so that no reallocation leaves a stray copy of the
/// secret bytes behind (best effort: a hint too small costs a reallocation).
pub(crate) fn encode_secret<T: WireType>(
    value: &T,
    capacity_hint: usize,
) -> Result<zeroize::Zeroizing<Vec<u8>>> {
    let fail = |reason: String| {
        Error::Decode(DecodeError {
            type_name: T::TYPE_NAME,
            path: String::new(),
            reason: format!("cannot encode: {reason}"),
        })
    };
    let mut named = zeroize::Zeroizing::new(Vec::with_capacity(capacity_hint));
    rmp_serde::encode::write_named(&mut *named, value).map_err(|e| fail(e.to_string()))?;
    scan::downgrade_str8(&named)
        .map(zeroize::Zeroizing::new)
        .map_err(|e| fail(e.reason))
}
