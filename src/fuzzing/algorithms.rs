//! Algorithm confusion across all ten algorithms: the three a key signs with
//! and the seven verify-only ones (keys of other issuers, imported from a
//! JWKS), in a world of its own.
//!
//! The world holds the fuzz world's three signing keys and seven verify-only
//! public keys: ES384 and ES512 (committed P-384 and P-521 keys) and PS256,
//! PS384, PS512, RS384, RS512 all on the committed RSA key's modulus, the
//! modulus `fuzz-rs` signs RS256 with. So one RSA key is published under six
//! algorithms, and a token is accepted only under the kid whose algorithm
//! its header names and whose scheme signed it: no PS/RS confusion.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self as lc, EcdsaKeyPair, KeyPair, RsaKeyPair};

use super::tokens::verdicts_agree;
use super::world::{KIDS, World, b64, world};
use crate::keyring::{JwsAlgorithm, KeyId, KeyPurpose, Keyring, PublicKey};
use crate::verify::{Audience, Verifier};

/// The verify-only keys of the algorithms world.
const VERIFY_ONLY_KIDS: [(&str, JwsAlgorithm); 7] = [
    ("fuzz-es384", JwsAlgorithm::Es384),
    ("fuzz-es512", JwsAlgorithm::Es512),
    ("fuzz-ps256", JwsAlgorithm::Ps256),
    ("fuzz-ps384", JwsAlgorithm::Ps384),
    ("fuzz-ps512", JwsAlgorithm::Ps512),
    ("fuzz-rs384", JwsAlgorithm::Rs384),
    ("fuzz-rs512", JwsAlgorithm::Rs512),
];

const P384_PKCS8: &[u8] = include_bytes!("../../tests/vectors/p384.pk8");
const P521_PKCS8: &[u8] = include_bytes!("../../tests/vectors/p521.pk8");
const RSA_PKCS8: &[u8] = include_bytes!("../../tests/vectors/rsa2048.pk8");

/// The private halves of the verify-only keys (each ECDSA key twice: the
/// JWS `r || s` form and DER, which must never verify).
struct Signers {
    p384: EcdsaKeyPair,
    p384_der: EcdsaKeyPair,
    p521: EcdsaKeyPair,
    p521_der: EcdsaKeyPair,
    rsa: RsaKeyPair,
}

fn signers() -> &'static Signers {
    static SIGNERS: OnceLock<Signers> = OnceLock::new();
    SIGNERS.get_or_init(|| {
        let ec = |alg, der| {
            EcdsaKeyPair::from_private_key_der(alg, der)
                .unwrap_or_else(|e| panic!("a committed EC key loads: {e}"))
        };
        Signers {
            p384: ec(&lc::ECDSA_P384_SHA384_FIXED_SIGNING, P384_PKCS8),
            p384_der: ec(&lc::ECDSA_P384_SHA384_ASN1_SIGNING, P384_PKCS8),
            p521: ec(&lc::ECDSA_P521_SHA512_FIXED_SIGNING, P521_PKCS8),
            p521_der: ec(&lc::ECDSA_P521_SHA512_ASN1_SIGNING, P521_PKCS8),
            rsa: RsaKeyPair::from_pkcs8(RSA_PKCS8)
                .unwrap_or_else(|e| panic!("the committed RSA key loads: {e}")),
        }
    })
}

fn point<const L: usize>(pair: &EcdsaKeyPair) -> ([u8; L], [u8; L]) {
    let p = pair.public_key().as_ref();
    let (mut x, mut y) = ([0u8; L], [0u8; L]);
    x.copy_from_slice(&p[1..=L]);
    y.copy_from_slice(&p[1 + L..]);
    (x, y)
}

/// The public key of a verify-only kid.
fn public_of(alg: JwsAlgorithm) -> PublicKey {
    let s = signers();
    match alg {
        JwsAlgorithm::Es384 => {
            let (x, y) = point::<48>(&s.p384);
            PublicKey::P384 { x, y }
        }
        JwsAlgorithm::Es512 => {
            let (x, y) = point::<66>(&s.p521);
            PublicKey::P521 { x, y }
        }
        _ => PublicKey::RsaVerifyOnly {
            n: s.rsa
                .public_key()
                .modulus()
                .big_endian_without_leading_zero()
                .to_vec(),
            alg,
        },
    }
}

fn algorithms_world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let base = world();
        let keyring = Keyring::new();
        let keys = KIDS
            .iter()
            .filter_map(|(kid, _)| base.keyring.root_key(kid))
            .collect::<Vec<_>>();
        for key in keys {
            keyring
                .insert(key)
                .unwrap_or_else(|e| panic!("the fuzz world's key: {e}"));
        }
        keyring
            .insert_public_keys(
                VERIFY_ONLY_KIDS
                    .iter()
                    .map(|(kid, alg)| {
                        let id =
                            KeyId::new(kid).unwrap_or_else(|_| unreachable!("a valid literal"));
                        (id, public_of(*alg), KeyPurpose::Bearer)
                    })
                    .collect(),
            )
            .unwrap_or_else(|e| panic!("the verify-only keys: {e}"));
        let store = base.store.clone();
        let audience = Audience::new("vault.io").unwrap_or_else(|_| unreachable!("non-empty"));
        let build = |cache: usize, nodes: bool| {
            let b = Verifier::builder(keyring.clone(), store.clone(), audience.clone())
                .key_wait(Duration::ZERO);
            let b = if cache > 0 { b.cache(cache) } else { b };
            if nodes {
                b.node_tokens(crate::verify::NodeTokens::Accept)
            } else {
                b
            }
            .build()
        };
        World {
            verifier: build(0, false),
            cached: build(64, false),
            nodes: build(0, true),
            keyring,
            store: Arc::clone(&store),
        }
    })
}

/// Every kid byte 0 can pick: the signing keys, an unknown kid (index 3, as
/// before the verify-only keys), then the verify-only keys.
fn kid_of(k: u8) -> (&'static str, Option<JwsAlgorithm>) {
    let all: [(&str, Option<JwsAlgorithm>); 11] = [
        (KIDS[0].0, Some(KIDS[0].1.into())),
        (KIDS[1].0, Some(KIDS[1].1.into())),
        (KIDS[2].0, Some(KIDS[2].1.into())),
        ("fuzz-none", None),
        (VERIFY_ONLY_KIDS[0].0, Some(VERIFY_ONLY_KIDS[0].1)),
        (VERIFY_ONLY_KIDS[1].0, Some(VERIFY_ONLY_KIDS[1].1)),
        (VERIFY_ONLY_KIDS[2].0, Some(VERIFY_ONLY_KIDS[2].1)),
        (VERIFY_ONLY_KIDS[3].0, Some(VERIFY_ONLY_KIDS[3].1)),
        (VERIFY_ONLY_KIDS[4].0, Some(VERIFY_ONLY_KIDS[4].1)),
        (VERIFY_ONLY_KIDS[5].0, Some(VERIFY_ONLY_KIDS[5].1)),
        (VERIFY_ONLY_KIDS[6].0, Some(VERIFY_ONLY_KIDS[6].1)),
    ];
    all[usize::from(k) % all.len()]
}

/// The scheme byte 2 picks (low 7 bits): the three signing keys, the input
/// itself as a signature (index 3, as before), then the verify-only schemes.
fn scheme_of(s: u8) -> Option<JwsAlgorithm> {
    const ALL: [Option<JwsAlgorithm>; 11] = [
        Some(JwsAlgorithm::EdDsa),
        Some(JwsAlgorithm::Es256),
        Some(JwsAlgorithm::Rs256),
        None,
        Some(JwsAlgorithm::Es384),
        Some(JwsAlgorithm::Es512),
        Some(JwsAlgorithm::Ps256),
        Some(JwsAlgorithm::Ps384),
        Some(JwsAlgorithm::Ps512),
        Some(JwsAlgorithm::Rs384),
        Some(JwsAlgorithm::Rs512),
    ];
    ALL[usize::from(s & 0x7f) % ALL.len()]
}

/// `input` signed by `scheme`'s key of this world; ECDSA in DER when `der`.
fn sign(scheme: JwsAlgorithm, input: &[u8], der: bool) -> Vec<u8> {
    let rng = SystemRandom::new();
    let s = signers();
    let ecdsa = |pair: &EcdsaKeyPair| {
        pair.sign(&rng, input)
            .map(|sig| sig.as_ref().to_vec())
            .unwrap_or_else(|e| panic!("ECDSA signs: {e}"))
    };
    let rsa = |encoding: &'static dyn lc::RsaEncoding| {
        let mut sig = vec![0u8; s.rsa.public_modulus_len()];
        s.rsa
            .sign(encoding, &rng, input, &mut sig)
            .unwrap_or_else(|e| panic!("RSA signs: {e}"));
        sig
    };
    match (scheme, der) {
        (JwsAlgorithm::Es384, false) => ecdsa(&s.p384),
        (JwsAlgorithm::Es384, true) => ecdsa(&s.p384_der),
        (JwsAlgorithm::Es512, false) => ecdsa(&s.p521),
        (JwsAlgorithm::Es512, true) => ecdsa(&s.p521_der),
        (JwsAlgorithm::Ps256, _) => rsa(&lc::RSA_PSS_SHA256),
        (JwsAlgorithm::Ps384, _) => rsa(&lc::RSA_PSS_SHA384),
        (JwsAlgorithm::Ps512, _) => rsa(&lc::RSA_PSS_SHA512),
        (JwsAlgorithm::Rs384, _) => rsa(&lc::RSA_PKCS1_SHA384),
        (JwsAlgorithm::Rs512, _) => rsa(&lc::RSA_PKCS1_SHA512),
        (other, _) => {
            let Some(alg) = other.signing() else {
                unreachable!("every verify-only scheme is matched above")
            };
            world()
                .keyring
                .active_for(alg)
                .and_then(|key| key.sign(input))
                .unwrap_or_else(|e| panic!("the fuzz world's {alg} key signs: {e}"))
        }
    }
}

/// Algorithm confusion, structured: byte 0 picks the `kid` (a signing key,
/// an unknown kid, or a verify-only key), byte 1 the header's `alg` (the ten,
/// RFC 9864's `Ed25519`, and names that must never pass), byte 2 the scheme
/// that signs (low 7 bits; or a signature made of the input) and, in its top
/// bit, DER instead of `r || s` for ECDSA; the rest is the payload. A token
/// is accepted only if the header names the kid's algorithm, that
/// algorithm's scheme signed it with the kid's key, in the JWS form; single,
/// batch and cached verification agree. Returns whether it was accepted.
pub fn verify_algorithms(data: &[u8]) -> bool {
    const ALGS: [&str; 17] = [
        "EdDSA", "Ed25519", "ES256", "RS256", "HS256", "none", "PS256", "ES384", "ES512", "PS384",
        "PS512", "RS384", "RS512", "HS384", "HS512", "ps256", "ES256K",
    ];
    let w = algorithms_world();
    let [k, a, s, payload @ ..] = data else {
        return false;
    };
    let (kid, kid_alg) = kid_of(*k);
    let alg = ALGS[usize::from(*a) % ALGS.len()];
    let header = format!(r#"{{"alg":"{alg}","kid":"{kid}","typ":"JWT"}}"#);
    let input = format!("{}.{}", b64(header.as_bytes()), b64(payload));
    let scheme = scheme_of(*s);
    let der = *s & 0x80 != 0;
    let sig = match scheme {
        Some(scheme) => sign(scheme, input.as_bytes(), der),
        None => payload.iter().rev().take(300).copied().collect(),
    };
    let token = format!("{input}.{}", b64(&sig));
    let accepted = verdicts_agree(w, token.as_bytes());
    if accepted {
        let (Some(kid_alg), Some(scheme)) = (kid_alg, scheme) else {
            panic!("accepted a token of an unknown kid or an arbitrary signature");
        };
        assert_eq!(kid_alg, scheme, "accepted another key's signature");
        assert_eq!(
            JwsAlgorithm::from_header(alg),
            Some(kid_alg),
            "accepted alg {alg} for a {kid_alg} key"
        );
        assert!(
            !(der && matches!(scheme, JwsAlgorithm::Es384 | JwsAlgorithm::Es512)),
            "accepted a DER {scheme} signature"
        );
    }
    accepted
}
