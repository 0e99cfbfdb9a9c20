//! How claims are written: the one fixed order of [`Claims`]' members, told
//! to a [`ClaimSink`], and the two sinks that write it — serde's (the
//! [`Serialize`] impl, for any serde format) and the token payload's own
//! compact JSON writer.
//!
//! The JSON writer produces exactly serde_json's compact output of the
//! [`Serialize`] impl (tested below, byte for byte, on strings that need
//! every kind of escape), without serde_json's per-byte escaping scan: it
//! first copies every string as it is and then looks at the whole payload
//! once (no `\`, no control byte, no quote but the ones it wrote: then no
//! string needed an escape); otherwise (rare: our claims are names and IDs)
//! it writes again with serde_json escaping every string. Member names are
//! our own constants and need no escaping.

use std::collections::BTreeMap;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use super::json::{Cnf, CnfJwk};
use super::{Claims, EXCHANGE_CLAIMS};
use crate::model::ProofKey;

/// A member's name, bare (for serde) and as JSON writes it before the value
/// (`"name":`), both made at compile time by `name!`.
#[derive(Clone, Copy)]
pub(super) struct Name {
    bare: &'static str,
    quoted: &'static str,
}

/// The [`Name`] of the member `$n` (a literal of letters and underscores:
/// nothing to escape).
macro_rules! name {
    ($n:literal) => {
        Name {
            bare: $n,
            quoted: concat!("\"", $n, "\":"),
        }
    };
}

/// What the claims are written to, member by member, in [`Claims::write_to`]'s
/// order.
pub(super) trait ClaimSink {
    type Error;
    fn string(&mut self, name: Name, value: &str) -> Result<(), Self::Error>;
    fn strings(&mut self, name: Name, values: &[String]) -> Result<(), Self::Error>;
    fn integer(&mut self, name: Name, value: i64) -> Result<(), Self::Error>;
    fn cnf(&mut self, key: &ProofKey) -> Result<(), Self::Error>;
    fn map(&mut self, name: Name, value: &BTreeMap<String, String>) -> Result<(), Self::Error>;
}

impl Claims {
    /// Tells `sink` every member, in the one order our tokens use.
    pub(super) fn write_to<S: ClaimSink>(&self, sink: &mut S) -> Result<(), S::Error> {
        // A node token has no allocation claims (unless a malformed one had
        // both: then both are written back, as read).
        let allocation = self.node.is_none()
            || !(self.namespace.is_empty()
                && self.job_id.is_empty()
                && self.allocation_id.is_empty());
        if allocation {
            sink.string(name!("nomad_namespace"), &self.namespace)?;
            sink.string(name!("nomad_job_id"), &self.job_id)?;
            sink.string(name!("nomad_allocation_id"), &self.allocation_id)?;
        }
        if let Some(n) = &self.node {
            sink.string(name!("nomad_node_id"), &n.node_id)?;
            sink.string(name!("nomad_node_pool"), &n.node_pool)?;
            if !n.node_class.is_empty() {
                sink.string(name!("nomad_node_class"), &n.node_class)?;
            }
            sink.string(name!("nomad_node_datacenter"), &n.datacenter)?;
        }
        if let Some(t) = &self.task {
            sink.string(name!("nomad_task"), t)?;
        }
        if let Some(svc) = &self.service {
            sink.string(name!("nomad_service"), svc)?;
        }
        // Nomad's order and names (WorkloadIdentityClaims), each omitted
        // when empty as Nomad's omitempty does.
        let exchange = [
            (name!("consul_namespace"), &self.consul_namespace),
            (name!("vault_namespace"), &self.vault_namespace),
            (name!("vault_role"), &self.vault_role),
        ];
        debug_assert!(exchange.iter().map(|(n, _)| n.bare).eq(EXCHANGE_CLAIMS));
        for (name, v) in exchange {
            if !v.is_empty() {
                sink.string(name, v)?;
            }
        }
        sink.string(name!("sub"), &self.subject)?;
        match self.audience.as_slice() {
            [] => {}
            [one] => sink.string(name!("aud"), one)?,
            many => sink.strings(name!("aud"), many)?,
        }
        for (name, v) in [
            (name!("iat"), self.issued_at),
            (name!("nbf"), self.not_before),
            (name!("exp"), self.expires_at),
        ] {
            if let Some(v) = v {
                sink.integer(name, v)?;
            }
        }
        sink.string(name!("jti"), &self.jwt_id)?;
        if let Some(iss) = &self.issuer {
            sink.string(name!("iss"), iss)?;
        }
        if let Some(key) = &self.confirmation {
            sink.cnf(key)?;
        }
        if !self.extra_claims.is_empty() {
            sink.map(name!("extra_claims"), &self.extra_claims)?;
        }
        Ok(())
    }

    /// The claims as compact JSON (the token payload), appended to `out`.
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) {
        let start = out.len();
        // First with every string copied as it is, counting the quotes put
        // around names and strings: the result is the escaped form exactly
        // when it holds no `\`, no control byte and no quote besides those
        // (then no string needed an escape). One look at the whole costs
        // less than one per string. Otherwise, and when serde_json writes a
        // nested member (`cnf`, `extra_claims`), again with escapes.
        if self.confirmation.is_none() && self.extra_claims.is_empty() {
            if let Some(quotes) = self.write_json_as(out, Strings::AsTheyAre) {
                if only_these_quotes(&out[start..], quotes) {
                    return;
                }
            }
            out.truncate(start);
        }
        self.write_json_as(out, Strings::Escaped);
    }

    /// Writes the JSON, strings as `strings` says; the quotes written if
    /// all were counted.
    fn write_json_as(&self, out: &mut Vec<u8>, strings: Strings) -> Option<usize> {
        out.push(b'{');
        let mut w = JsonSink {
            out,
            first: true,
            strings,
            quotes: Some(0),
        };
        // Writing to a Vec cannot fail: serde_json's io errors come from the
        // writer only.
        let Ok(()) = self.write_to(&mut w);
        let quotes = w.quotes;
        out.push(b'}');
        quotes
    }
}

impl Serialize for Claims {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut sink = SerdeSink(s.serialize_map(None)?);
        self.write_to(&mut sink)?;
        sink.0.end()
    }
}

/// The members as entries of a serde map.
struct SerdeSink<M>(M);

impl<M: SerializeMap> ClaimSink for SerdeSink<M> {
    type Error = M::Error;

    fn string(&mut self, name: Name, value: &str) -> Result<(), M::Error> {
        self.0.serialize_entry(name.bare, value)
    }

    fn strings(&mut self, name: Name, values: &[String]) -> Result<(), M::Error> {
        self.0.serialize_entry(name.bare, values)
    }

    fn integer(&mut self, name: Name, value: i64) -> Result<(), M::Error> {
        self.0.serialize_entry(name.bare, &value)
    }

    fn cnf(&mut self, key: &ProofKey) -> Result<(), M::Error> {
        self.0.serialize_entry(
            name!("cnf").bare,
            &Cnf {
                jwk: CnfJwk::of(key),
            },
        )
    }

    fn map(&mut self, name: Name, value: &BTreeMap<String, String>) -> Result<(), M::Error> {
        self.0.serialize_entry(name.bare, value)
    }
}

/// How [`JsonSink`] writes strings.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Strings {
    /// Copied between quotes without a look (the whole is looked at after).
    AsTheyAre,
    /// Each written by serde_json, which escapes what needs it.
    Escaped,
}

/// The members as compact JSON, between braces the caller writes.
struct JsonSink<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
    strings: Strings,
    /// The quotes written around names and strings; `None` once serde_json
    /// wrote a value (its quotes are not counted).
    quotes: Option<usize>,
}

/// Whether `json` holds no `\`, no control byte and exactly `quotes`
/// quotes. No early exit, and counters that cannot overflow a byte per
/// chunk, so the loop compiles to wide compares.
fn only_these_quotes(json: &[u8], quotes: usize) -> bool {
    let mut bad = false;
    let mut seen = 0usize;
    for chunk in json.chunks(128) {
        let (b, q) = chunk.iter().fold((false, 0u8), |(bad, q), &c| {
            (bad | (c < 0x20) | (c == b'\\'), q + u8::from(c == b'"'))
        });
        bad |= b;
        seen += usize::from(q);
    }
    !bad && seen == quotes
}

impl JsonSink<'_> {
    /// `"name":` (after a comma unless first).
    fn name(&mut self, name: Name) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        self.out.extend_from_slice(name.quoted.as_bytes());
        self.quotes = self.quotes.map(|q| q + 2);
    }

    fn value_string(&mut self, value: &str) {
        if self.strings == Strings::AsTheyAre {
            self.quotes = self.quotes.map(|q| q + 2);
            self.out.push(b'"');
            self.out.extend_from_slice(value.as_bytes());
            self.out.push(b'"');
        } else {
            self.serde(value);
        }
    }

    /// A value serde_json writes (escaping, nesting).
    fn serde(&mut self, value: &(impl Serialize + ?Sized)) {
        self.quotes = None;
        // Strings and maps of strings into a Vec: nothing can fail.
        let _ = serde_json::to_writer(&mut *self.out, value);
    }
}

impl ClaimSink for JsonSink<'_> {
    type Error = std::convert::Infallible;

    fn string(&mut self, name: Name, value: &str) -> Result<(), Self::Error> {
        self.name(name);
        self.value_string(value);
        Ok(())
    }

    fn strings(&mut self, name: Name, values: &[String]) -> Result<(), Self::Error> {
        self.name(name);
        self.out.push(b'[');
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            self.value_string(v);
        }
        self.out.push(b']');
        Ok(())
    }

    fn integer(&mut self, name: Name, value: i64) -> Result<(), Self::Error> {
        self.name(name);
        self.out
            .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
        Ok(())
    }

    fn cnf(&mut self, key: &ProofKey) -> Result<(), Self::Error> {
        self.name(name!("cnf"));
        self.serde(&Cnf {
            jwk: CnfJwk::of(key),
        });
        Ok(())
    }

    fn map(&mut self, name: Name, value: &BTreeMap<String, String>) -> Result<(), Self::Error> {
        self.name(name);
        self.serde(value);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::NodeClaims;

    fn json(c: &Claims) -> Vec<u8> {
        let mut out = Vec::new();
        c.write_json(&mut out);
        out
    }

    /// Strings that need escaping, and some that look like they might.
    const AWKWARD: [&str; 9] = [
        "",
        "plain",
        "quote\"inside",
        "back\\slash",
        "tab\there",
        "nul\u{0}byte",
        "\u{1f}unit",
        "del\u{7f} é ü 🦀 \u{2028}",
        "</script>",
    ];

    #[test]
    fn the_writer_is_serde_json_byte_for_byte() {
        let mut n = 0;
        for (i, s) in AWKWARD.iter().enumerate() {
            let t = AWKWARD[(i + 3) % AWKWARD.len()].to_string();
            let claims = [
                Claims {
                    namespace: s.to_string(),
                    job_id: t.clone(),
                    allocation_id: "5f8c9e0a-1111-2222-3333-444455556666".into(),
                    task: Some(t.clone()),
                    consul_namespace: s.to_string(),
                    vault_namespace: t.clone(),
                    vault_role: s.to_string(),
                    subject: format!("{s}:{t}"),
                    audience: vec![s.to_string()],
                    issued_at: Some(1_700_000_000),
                    not_before: Some(-5),
                    expires_at: Some(i64::MAX),
                    jwt_id: t.clone(),
                    issuer: Some(s.to_string()),
                    extra_claims: [(s.to_string(), t.clone()), ("k".into(), s.to_string())]
                        .into_iter()
                        .collect(),
                    ..Claims::default()
                },
                Claims {
                    service: Some(s.to_string()),
                    audience: vec![s.to_string(), t.clone(), String::new()],
                    issued_at: Some(i64::MIN),
                    confirmation: Some(ProofKey {
                        alg: "EdDSA".into(),
                        crv: "Ed25519".into(),
                        kty: "OKP".into(),
                        x: s.to_string(),
                        y: String::new(),
                    }),
                    ..Claims::default()
                },
                Claims {
                    node: Some(NodeClaims {
                        node_id: s.to_string(),
                        node_pool: t.clone(),
                        node_class: s.to_string(),
                        datacenter: t.clone(),
                    }),
                    confirmation: Some(ProofKey {
                        alg: "ES256".into(),
                        crv: "P-256".into(),
                        kty: "EC".into(),
                        x: t.clone(),
                        y: s.to_string(),
                    }),
                    ..Claims::default()
                },
                Claims::default(),
            ];
            for c in &claims {
                assert_eq!(
                    String::from_utf8(json(c)).unwrap(),
                    serde_json::to_string(c).unwrap()
                );
                assert_eq!(c.to_json().as_bytes(), json(c));
                n += 1;
            }
        }
        assert_eq!(n, 4 * AWKWARD.len());
    }

    #[test]
    fn the_whole_payload_check_decides_every_byte_at_every_place() {
        let reference = |s: &[u8]| !s.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
        // Short strings, and lengths around the 128-byte chunks it counts in.
        for len in (1..=17).chain(126..=131) {
            for at in [0, len / 2, len - 1] {
                for b in 0u8..=0xff {
                    let mut s = vec![b'a'; len];
                    s[at] = b;
                    assert_eq!(
                        only_these_quotes(&s, 0),
                        reference(&s),
                        "byte {b:#04x} at {at} of {len}"
                    );
                }
            }
        }
        // Every pair of neighbouring bytes.
        for x in 0u8..=0xff {
            for y in 0u8..=0xff {
                let s = [b'z', x, y, b'z', b'z', b'z', b'z', b'z', x, y];
                assert_eq!(only_these_quotes(&s, 0), reference(&s), "{x:#04x} {y:#04x}");
            }
        }
        // The quotes it wrote are counted, one more is not: in every chunk.
        let mut s = vec![b'a'; 300];
        for at in [0, 127, 128, 255, 299] {
            s[at] = b'"';
        }
        assert!(only_these_quotes(&s, 5));
        assert!(!only_these_quotes(&s, 4) && !only_these_quotes(&s, 6));
        assert!(only_these_quotes(b"", 0));
        assert!(only_these_quotes("é ü 🦀 \u{2028}\u{7f}".as_bytes(), 0));
    }
}
