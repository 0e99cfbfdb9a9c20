//! The claims' JSON form read back: the strict deserializer (one JSON type
//! per claim, no claim twice). The writing side is `encode`.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use super::{Claims, NodeClaims};

/// `cnf`: `{"jwk": {...}}`, nothing else.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Cnf<'a> {
    #[serde(borrow)]
    pub(super) jwk: CnfJwk<'a>,
}

/// `cnf.jwk`: a public JWK with its `alg`. Members other than these (a
/// private `d`, say) make the claim set invalid; each at most once.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CnfJwk<'a> {
    #[serde(borrow)]
    kty: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    crv: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    x: std::borrow::Cow<'a, str>,
    #[serde(borrow, default, skip_serializing_if = "str::is_empty")]
    y: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    alg: std::borrow::Cow<'a, str>,
}

impl<'a> CnfJwk<'a> {
    pub(super) fn of(key: &'a crate::model::ProofKey) -> CnfJwk<'a> {
        CnfJwk {
            kty: key.kty.as_str().into(),
            crv: key.crv.as_str().into(),
            x: key.x.as_str().into(),
            y: key.y.as_str().into(),
            alg: key.alg.as_str().into(),
        }
    }

    fn into_key(self) -> crate::model::ProofKey {
        crate::model::ProofKey {
            alg: self.alg.into_owned(),
            crv: self.crv.into_owned(),
            kty: self.kty.into_owned(),
            x: self.x.into_owned(),
            y: self.y.into_owned(),
        }
    }
}

/// `aud`: a string or an array of strings. Read by a visitor of its own (an
/// untagged enum would buffer the value and try each form in turn).
enum Aud {
    One(String),
    Many(Vec<String>),
}

impl<'de> Deserialize<'de> for Aud {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Aud, D::Error> {
        struct AudVisitor;
        impl<'de> Visitor<'de> for AudVisitor {
            type Value = Aud;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of strings")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Aud, E> {
                Ok(Aud::One(v.to_string()))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<Aud, E> {
                Ok(Aud::One(v))
            }

            fn visit_seq<S: de::SeqAccess<'de>>(self, mut seq: S) -> Result<Aud, S::Error> {
                let mut all = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(16));
                while let Some(a) = seq.next_element::<String>()? {
                    all.push(a);
                }
                Ok(Aud::Many(all))
            }
        }
        d.deserialize_any(AudVisitor)
    }
}

impl<'de> Deserialize<'de> for Claims {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Claims, D::Error> {
        d.deserialize_map(ClaimsVisitor)
    }
}

struct ClaimsVisitor;

fn set<T, E: de::Error>(slot: &mut Option<T>, name: &str, value: T) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::custom(format_args!("duplicate claim {name:?}")));
    }
    *slot = Some(value);
    Ok(())
}

impl<'de> Visitor<'de> for ClaimsVisitor {
    type Value = Claims;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object of claims")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Claims, A::Error> {
        let mut ns = None;
        let mut job = None;
        let mut alloc = None;
        let mut task = None;
        let mut service = None;
        let mut consul_ns = None;
        let mut vault_ns = None;
        let mut vault_role = None;
        let mut sub = None;
        let mut aud = None;
        let mut iat = None;
        let mut nbf = None;
        let mut exp = None;
        let mut jti = None;
        let mut iss = None;
        let mut cnf = None;
        let mut extra: Option<ExtraClaims> = None;
        let mut node_id = None;
        let mut node_pool = None;
        let mut node_class = None;
        let mut node_dc = None;
        let mut others: Vec<String> = Vec::new();
        // Numeric dates: integers only (a float or a string is an error).
        fn date<'de, A: MapAccess<'de>>(map: &mut A, name: &str) -> Result<i64, A::Error> {
            map.next_value::<i64>().map_err(|e| {
                de::Error::custom(format_args!(
                    "claim {name:?} must be an integer number of seconds: {e}"
                ))
            })
        }
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let k = key.as_ref();
            match k {
                "nomad_namespace" => set(&mut ns, k, map.next_value::<String>()?)?,
                "nomad_job_id" => set(&mut job, k, map.next_value::<String>()?)?,
                "nomad_allocation_id" => set(&mut alloc, k, map.next_value::<String>()?)?,
                "nomad_task" => set(&mut task, k, map.next_value::<String>()?)?,
                "nomad_service" => set(&mut service, k, map.next_value::<String>()?)?,
                "consul_namespace" => set(&mut consul_ns, k, map.next_value::<String>()?)?,
                "vault_namespace" => set(&mut vault_ns, k, map.next_value::<String>()?)?,
                "vault_role" => set(&mut vault_role, k, map.next_value::<String>()?)?,
                "nomad_node_id" => set(&mut node_id, k, map.next_value::<String>()?)?,
                "nomad_node_pool" => set(&mut node_pool, k, map.next_value::<String>()?)?,
                "nomad_node_class" => set(&mut node_class, k, map.next_value::<String>()?)?,
                "nomad_node_datacenter" => set(&mut node_dc, k, map.next_value::<String>()?)?,
                "sub" => set(&mut sub, k, map.next_value::<String>()?)?,
                "aud" => set(&mut aud, k, map.next_value::<Aud>()?)?,
                "iat" => set(&mut iat, k, date(&mut map, k)?)?,
                "nbf" => set(&mut nbf, k, date(&mut map, k)?)?,
                "exp" => set(&mut exp, k, date(&mut map, k)?)?,
                "jti" => set(&mut jti, k, map.next_value::<String>()?)?,
                "iss" => set(&mut iss, k, map.next_value::<String>()?)?,
                "cnf" => {
                    let c: Cnf<'_> = map.next_value().map_err(|e| {
                        de::Error::custom(format_args!(
                            "claim \"cnf\" must be {{\"jwk\":{{kty, crv, x, y, alg}}}}, a public key only: {e}"
                        ))
                    })?;
                    set(&mut cnf, k, c.jwk.into_key())?
                }
                "extra_claims" => {
                    let e: ExtraClaims = map.next_value().map_err(|e| {
                        de::Error::custom(format_args!(
                            "claim \"extra_claims\" must be an object of strings, each name once: {e}"
                        ))
                    })?;
                    set(&mut extra, k, e)?
                }
                other => {
                    if others.iter().any(|o| o == other) {
                        return Err(de::Error::custom(format_args!("duplicate claim {other:?}")));
                    }
                    others.push(other.to_string());
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Claims {
            namespace: ns.unwrap_or_default(),
            job_id: job.unwrap_or_default(),
            allocation_id: alloc.unwrap_or_default(),
            task,
            service,
            consul_namespace: consul_ns.unwrap_or_default(),
            vault_namespace: vault_ns.unwrap_or_default(),
            vault_role: vault_role.unwrap_or_default(),
            subject: sub.unwrap_or_default(),
            audience: match aud {
                None => Vec::new(),
                Some(Aud::One(a)) => vec![a],
                Some(Aud::Many(v)) => v,
            },
            issued_at: iat,
            not_before: nbf,
            expires_at: exp,
            jwt_id: jti.unwrap_or_default(),
            issuer: iss,
            confirmation: cnf,
            node: (node_id.is_some()
                || node_pool.is_some()
                || node_class.is_some()
                || node_dc.is_some())
            .then(|| NodeClaims {
                node_id: node_id.unwrap_or_default(),
                node_pool: node_pool.unwrap_or_default(),
                node_class: node_class.unwrap_or_default(),
                datacenter: node_dc.unwrap_or_default(),
            }),
            extra_claims: extra.map(|e| e.0).unwrap_or_default(),
        })
    }
}

/// `extra_claims`: an object of strings, each name once.
struct ExtraClaims(BTreeMap<String, String>);

impl<'de> Deserialize<'de> for ExtraClaims {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ExtraClaims, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ExtraClaims;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ExtraClaims, A::Error> {
                let mut out = BTreeMap::new();
                while let Some(k) = map.next_key::<String>()? {
                    if out.contains_key(&k) {
                        return Err(de::Error::custom(format_args!(
                            "duplicate name {:?}",
                            crate::error::truncate_for_message(&k)
                        )));
                    }
                    let v = map.next_value::<String>()?;
                    out.insert(k, v);
                }
                Ok(ExtraClaims(out))
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::canonical;

    fn parse(json: &str) -> Result<Claims, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn audience_is_a_string_when_one_and_an_array_when_several() {
        let mut c = Claims {
            audience: vec!["vault.io".into()],
            ..Claims::default()
        };
        assert!(
            c.to_json().contains("\"aud\":\"vault.io\""),
            "{}",
            c.to_json()
        );
        c.audience.push("consul.io".into());
        assert!(c.to_json().contains("\"aud\":[\"vault.io\",\"consul.io\"]"));
        c.audience.clear();
        assert!(!c.to_json().contains("aud"));
    }

    #[test]
    fn round_trips() {
        let c = Claims {
            namespace: "default".into(),
            job_id: "web".into(),
            allocation_id: "a1".into(),
            task: Some("server".into()),
            service: None,
            consul_namespace: String::new(),
            vault_namespace: "ns1/team".into(),
            vault_role: "web".into(),
            subject: "global:default:web:g:server:default".into(),
            audience: vec!["a".into(), "b".into()],
            issued_at: Some(10),
            not_before: Some(10),
            expires_at: Some(70),
            jwt_id: "j".into(),
            issuer: Some("https://x".into()),
            confirmation: None,
            node: None,
            extra_claims: [("unique_id".to_string(), "default:web".to_string())]
                .into_iter()
                .collect(),
        };
        assert_eq!(parse(&c.to_json()).unwrap(), c);
    }

    #[test]
    fn node_tokens_round_trip_without_allocation_claims() {
        let c = Claims {
            node: Some(NodeClaims {
                node_id: "n1".into(),
                node_pool: "default".into(),
                node_class: String::new(),
                datacenter: "dc1".into(),
            }),
            subject: "node:global:default:n1:default".into(),
            audience: vec!["nomadproject.io".into()],
            jwt_id: "j".into(),
            ..Claims::default()
        };
        let json = c.to_json();
        assert!(
            json.starts_with(r#"{"nomad_node_id":"n1","nomad_node_pool":"default","nomad_node_datacenter":"dc1","sub":"#),
            "{json}"
        );
        assert!(!json.contains("nomad_namespace") && !json.contains("nomad_node_class"));
        assert_eq!(parse(&json).unwrap(), c);
        assert_eq!(
            canonical::parse(json.as_bytes()),
            None,
            "node tokens take serde"
        );
        // Any node claim makes it a node token's claims.
        assert!(
            parse(r#"{"nomad_node_class":"gpu"}"#)
                .unwrap()
                .node
                .is_some()
        );
        assert!(
            parse(r#"{"nomad_allocation_id":"a"}"#)
                .unwrap()
                .node
                .is_none()
        );
    }

    #[test]
    fn strict_types_and_no_duplicates() {
        for (json, why) in [
            (r#"{"exp":"100"}"#, "must be an integer"),
            (r#"{"exp":100.0}"#, "must be an integer"),
            (r#"{"exp":1.5}"#, "must be an integer"),
            (r#"{"iat":1e3}"#, "must be an integer"),
            (r#"{"nbf":18446744073709551615}"#, "must be an integer"),
            (r#"{"sub":"a","sub":"b"}"#, "duplicate claim \"sub\""),
            (r#"{"x":1,"x":2}"#, "duplicate claim \"x\""),
            (r#"{"aud":5}"#, ""),
            (r#"{"aud":["a",5]}"#, ""),
            (r#"{"extra_claims":{"a":1}}"#, "object of strings"),
            (r#"{"extra_claims":["a"]}"#, "object of strings"),
            (
                r#"{"extra_claims":{"a":"x","a":"y"}}"#,
                "duplicate name \"a\"",
            ),
            (
                r#"{"extra_claims":{},"extra_claims":{}}"#,
                "duplicate claim",
            ),
            (r#"[]"#, ""),
        ] {
            let e = parse(json).unwrap_err().to_string();
            assert!(e.contains(why), "{json}: {e}");
        }
        let c = parse(r#"{"aud":"x","extra":{"deep":[1,2]},"exp":-5}"#).unwrap();
        assert_eq!(c.audience, ["x"]);
        assert_eq!(c.expires_at, Some(-5));
    }
}
