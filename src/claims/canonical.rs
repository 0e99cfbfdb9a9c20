//! The claims of our own tokens, recognised without serde.
//!
//! [`super::Claims`] serializes to one exact form: the claims in a fixed order,
//! no whitespace, integers for dates. A payload in exactly that form, whose
//! strings hold no escapes or control characters and are valid UTF-8, is
//! parsed here by a straight scan; anything else (another order, an unknown
//! claim, an escape, a float, a space) is declined and goes to the strict serde
//! parser, which then accepts or rejects it. For every input this scan
//! accepts, the serde parser gives the same claims (proven by property tests
//! and the `verify` fuzz target), so the outcome never depends on which path ran.

use super::Claims;

struct Scan<'a> {
    rest: &'a [u8],
}

impl<'a> Scan<'a> {
    /// Consumes `lit` if the input continues with it.
    fn eat(&mut self, lit: &[u8]) -> bool {
        match self.rest.strip_prefix(lit) {
            Some(rest) => {
                self.rest = rest;
                true
            }
            None => false,
        }
    }

    fn expect(&mut self, lit: &[u8]) -> Option<()> {
        self.eat(lit).then_some(())
    }

    /// A JSON string without escapes or control characters.
    fn string(&mut self) -> Option<String> {
        let body = self.rest.strip_prefix(b"\"")?;
        let end = body
            .iter()
            .position(|b| *b == b'"' || *b == b'\\' || *b < 0x20)?;
        if body[end] != b'"' {
            return None;
        }
        let s = std::str::from_utf8(&body[..end]).ok()?;
        self.rest = &body[end + 1..];
        Some(s.to_string())
    }

    /// A non-negative integer without a leading zero, small enough that it
    /// cannot overflow an `i64` (18 digits).
    fn integer(&mut self) -> Option<i64> {
        let digits = self.rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || digits > 18 || (digits > 1 && self.rest[0] == b'0') {
            return None;
        }
        let mut v: i64 = 0;
        for b in &self.rest[..digits] {
            v = v * 10 + i64::from(b - b'0');
        }
        self.rest = &self.rest[digits..];
        Some(v)
    }

    /// The rest of `"cnf":{"jwk":{"kty":...}}` after `"kty":`, as our
    /// serializer writes it: `kty`, `crv`, `x`, `y` (P-256 only), `alg`.
    fn proof_key(&mut self) -> Option<crate::model::ProofKey> {
        let kty = self.string()?;
        self.expect(br#","crv":"#)?;
        let crv = self.string()?;
        self.expect(br#","x":"#)?;
        let x = self.string()?;
        let y = self
            .optional(br#","y":"#, Scan::string)?
            .unwrap_or_default();
        self.expect(br#","alg":"#)?;
        let alg = self.string()?;
        self.expect(b"}}")?;
        Some(crate::model::ProofKey {
            alg,
            crv,
            kty,
            x,
            y,
        })
    }

    /// The rest of `"extra_claims":{...}` after the `{`: at least one
    /// `"name":"value"`, names strictly ascending (the order our `BTreeMap`
    /// writes; anything else, a duplicate included, is declined).
    fn extra_claims(&mut self) -> Option<std::collections::BTreeMap<String, String>> {
        let mut all = std::collections::BTreeMap::new();
        let mut last: Option<String> = None;
        loop {
            let name = self.string()?;
            if last.as_ref().is_some_and(|l| *l >= name) {
                return None;
            }
            self.expect(b":")?;
            let value = self.string()?;
            last = Some(name.clone());
            all.insert(name, value);
            if self.eat(b"}") {
                return Some(all);
            }
            self.expect(b",")?;
        }
    }

    /// `"s"` or `["s1","s2",...]`.
    fn audience(&mut self) -> Option<Vec<String>> {
        if !self.eat(b"[") {
            return Some(vec![self.string()?]);
        }
        let mut all = Vec::new();
        if self.eat(b"]") {
            return Some(all);
        }
        loop {
            all.push(self.string()?);
            if self.eat(b"]") {
                return Some(all);
            }
            self.expect(b",")?;
        }
    }

    fn optional<T>(
        &mut self,
        key: &[u8],
        value: impl FnOnce(&mut Self) -> Option<T>,
    ) -> Option<Option<T>> {
        if self.eat(key) {
            value(self).map(Some)
        } else {
            Some(None)
        }
    }
}

/// The claims, if `json` is exactly in our serializer's form (see the module
/// docs); `None` sends it to the serde parser.
pub(crate) fn parse(json: &[u8]) -> Option<Claims> {
    let mut s = Scan { rest: json };
    s.expect(br#"{"nomad_namespace":"#)?;
    let namespace = s.string()?;
    s.expect(br#","nomad_job_id":"#)?;
    let job_id = s.string()?;
    s.expect(br#","nomad_allocation_id":"#)?;
    let allocation_id = s.string()?;
    let task = s.optional(br#","nomad_task":"#, Scan::string)?;
    let service = s.optional(br#","nomad_service":"#, Scan::string)?;
    // Written only when not empty: an empty one (not our form) is declined.
    let mut nonempty = |key: &[u8]| match s.optional(key, Scan::string)? {
        Some(v) if v.is_empty() => None,
        v => Some(v.unwrap_or_default()),
    };
    let consul_namespace = nonempty(br#","consul_namespace":"#)?;
    let vault_namespace = nonempty(br#","vault_namespace":"#)?;
    let vault_role = nonempty(br#","vault_role":"#)?;
    s.expect(br#","sub":"#)?;
    let subject = s.string()?;
    let audience = s.optional(br#","aud":"#, Scan::audience)?;
    let issued_at = s.optional(br#","iat":"#, Scan::integer)?;
    let not_before = s.optional(br#","nbf":"#, Scan::integer)?;
    let expires_at = s.optional(br#","exp":"#, Scan::integer)?;
    s.expect(br#","jti":"#)?;
    let jwt_id = s.string()?;
    let issuer = s.optional(br#","iss":"#, Scan::string)?;
    let confirmation = s.optional(br#","cnf":{"jwk":{"kty":"#, Scan::proof_key)?;
    let extra_claims = s.optional(br#","extra_claims":{"#, Scan::extra_claims)?;
    s.expect(b"}")?;
    if !s.rest.is_empty() {
        return None;
    }
    Some(Claims {
        namespace,
        job_id,
        allocation_id,
        task,
        service,
        consul_namespace,
        vault_namespace,
        vault_role,
        subject,
        audience: audience.unwrap_or_default(),
        issued_at,
        not_before,
        expires_at,
        jwt_id,
        issuer,
        confirmation,
        node: None,
        extra_claims: extra_claims.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn serde_parse(json: &[u8]) -> Option<Claims> {
        serde_json::from_slice(json).ok()
    }

    fn claims() -> impl Strategy<Value = Claims> {
        // Strings with the characters that matter: quotes, backslashes,
        // control characters, non-ASCII.
        let s =
            || proptest::string::string_regex("[a-z0-9:/.\"\\\\\u{1}\u{7f}é😀 -]{0,12}").unwrap();
        (
            (s(), s(), s(), s(), any::<bool>()),
            (s(), proptest::collection::vec(s(), 0..4)),
            (
                proptest::option::of(0i64..=i64::MAX),
                proptest::option::of(0i64..4_000_000_000),
                proptest::option::of(-5i64..4_000_000_000),
            ),
            (s(), proptest::option::of(s())),
            proptest::option::of((s(), s(), s(), s(), s())),
            proptest::collection::btree_map(s(), s(), 0..4),
            // The exchange claims: empty (left out) as often as not.
            (s(), s(), s()),
        )
            .prop_map(
                |(
                    (ns, job, alloc, work, is_task),
                    (sub, aud),
                    (iat, nbf, exp),
                    (jti, iss),
                    cnf,
                    extra_claims,
                    (consul_namespace, vault_namespace, vault_role),
                )| {
                    Claims {
                        namespace: ns,
                        job_id: job,
                        allocation_id: alloc,
                        task: is_task.then(|| work.clone()),
                        service: (!is_task).then_some(work),
                        consul_namespace,
                        vault_namespace,
                        vault_role,
                        subject: sub,
                        audience: aud,
                        issued_at: iat,
                        not_before: nbf,
                        expires_at: exp,
                        jwt_id: jti,
                        issuer: iss,
                        confirmation: cnf.map(|(alg, crv, kty, x, y)| crate::model::ProofKey {
                            alg,
                            crv,
                            kty,
                            x,
                            y,
                        }),
                        node: None,
                        extra_claims,
                    }
                },
            )
    }

    proptest! {
        /// Whatever we serialize, the scan either declines or gives exactly the
        /// claims serde gives (and the original).
        #[test]
        fn our_form_parses_the_same_both_ways(c in claims()) {
            let json = c.to_json();
            let serde = serde_parse(json.as_bytes());
            prop_assert_eq!(serde.as_ref(), Some(&c));
            if let Some(fast) = parse(json.as_bytes()) {
                prop_assert_eq!(Some(fast), serde);
            }
        }

        /// Any edit of our form: if the scan accepts it, serde accepts it with
        /// the same claims.
        #[test]
        fn edits_never_make_the_paths_disagree(
            c in claims(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            kind in 0u8..3,
        ) {
            let mut json = c.to_json().into_bytes();
            let i = at.index(json.len() + 1);
            match kind {
                0 => json.insert(i, byte),
                1 if i < json.len() => { json.remove(i); }
                _ if i < json.len() => json[i] = byte,
                _ => json.push(byte),
            }
            if let Some(fast) = parse(&json) {
                prop_assert_eq!(Some(fast), serde_parse(&json));
            }
        }
    }

    #[test]
    fn plain_claims_take_the_scan_and_others_decline() {
        let ours = br#"{"nomad_namespace":"default","nomad_job_id":"web","nomad_allocation_id":"a1","nomad_task":"server","sub":"global:default:web:g:server:default","aud":["vault.io","consul.io"],"iat":1700000000,"nbf":1700000000,"exp":1700003600,"jti":"j","iss":"https://n"}"#;
        let c = parse(ours).unwrap();
        assert_eq!(Some(&c), serde_parse(ours).as_ref());
        assert_eq!(c.audience, ["vault.io", "consul.io"]);
        // A WIT's claims, with cnf (P-256 and Ed25519 forms), take the scan too.
        for wit in [
            &br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","sub":"wimse://t/x","exp":5,"jti":"j","cnf":{"jwk":{"kty":"EC","crv":"P-256","x":"X","y":"Y","alg":"ES256"}}}"#[..],
            br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","sub":"wimse://t/x","exp":5,"jti":"j","cnf":{"jwk":{"kty":"OKP","crv":"Ed25519","x":"X","alg":"EdDSA"}}}"#,
        ] {
            let fast = parse(wit).unwrap();
            assert!(fast.confirmation.is_some());
            assert_eq!(Some(fast), serde_parse(wit));
        }
        // The exchange claims (Nomad 2.x) take the scan in Nomad's order,
        // after the workload; an empty one (we leave it out) is declined.
        let exchange = br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","nomad_task":"t","consul_namespace":"c","vault_namespace":"ns1/ns2","vault_role":"r","sub":"s","jti":"j"}"#;
        let fast = parse(exchange).unwrap();
        assert_eq!(
            (
                fast.consul_namespace.as_str(),
                fast.vault_namespace.as_str(),
                fast.vault_role.as_str()
            ),
            ("c", "ns1/ns2", "r")
        );
        assert_eq!(Some(fast), serde_parse(exchange));
        let role_only = br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","nomad_task":"t","vault_role":"r","sub":"s","jti":"j"}"#;
        assert_eq!(parse(role_only).unwrap().vault_role, "r");
        for declined in [
            &br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","nomad_task":"t","vault_role":"","sub":"s","jti":"j"}"#[..],
            br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","nomad_task":"t","vault_role":"r","vault_namespace":"n","sub":"s","jti":"j"}"#,
        ] {
            assert_eq!(parse(declined), None, "{}", String::from_utf8_lossy(declined));
            assert!(serde_parse(declined).is_some());
        }
        // Extra claims take the scan in our (ascending) order.
        let extra = br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","sub":"spiffe://t/x","aud":"v","exp":5,"jti":"j","extra_claims":{"dc":"dc1","unique_id":"d:w"}}"#;
        let fast = parse(extra).unwrap();
        assert_eq!(fast.extra_claims["unique_id"], "d:w");
        assert_eq!(Some(fast), serde_parse(extra));
        for declined in [
            // extra claims out of order, duplicated, empty, not strings
            &br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","sub":"s","jti":"j","extra_claims":{"b":"1","a":"2"}}"#[..],
            br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","sub":"s","jti":"j","extra_claims":{"a":"1","a":"2"}}"#,
            br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","sub":"s","jti":"j","extra_claims":{}}"#,
            br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","sub":"s","jti":"j","extra_claims":{"a":1}}"#,
        ] {
            assert_eq!(parse(declined), None, "{}", String::from_utf8_lossy(declined));
        }
        for declined in [
            // whitespace, another order, an unknown claim, an escape, a float,
            // a leading zero, a negative date, trailing bytes, a duplicate
            &br#"{ "nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","sub":"s","jti":"j"}"#[..],
            br#"{"nomad_job_id":"w","nomad_namespace":"d","nomad_allocation_id":"a","sub":"s","jti":"j"}"#,
            br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","x":1,"sub":"s","jti":"j"}"#,
            br#"{"nomad_namespace":"d\u0041","nomad_job_id":"w","nomad_allocation_id":"a","sub":"s","jti":"j"}"#,
            br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","sub":"s","iat":1.5,"jti":"j"}"#,
            br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","sub":"s","iat":01,"jti":"j"}"#,
            br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","sub":"s","exp":-1,"jti":"j"}"#,
            br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","sub":"s","jti":"j"} "#,
            br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","sub":"s","jti":"j","jti":"k"}"#,
            // cnf with a private member, or another member order
            br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","sub":"s","jti":"j","cnf":{"jwk":{"kty":"OKP","crv":"Ed25519","x":"X","alg":"EdDSA","d":"D"}}}"#,
            br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","sub":"s","jti":"j","cnf":{"jwk":{"crv":"Ed25519","kty":"OKP","x":"X","alg":"EdDSA"}}}"#,
            b"{\"nomad_namespace\":\"\xff\",\"nomad_job_id\":\"w\",\"nomad_allocation_id\":\"a\",\"sub\":\"s\",\"jti\":\"j\"}",
        ] {
            assert_eq!(parse(declined), None, "{}", String::from_utf8_lossy(declined));
        }
    }
}
