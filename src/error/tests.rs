//! Every variant has a code, codes keep their order, and messages say
//! what was wrong.

use super::*;

/// One value of every variant, so a variant added without a code fails here.
fn one_of_each() -> Vec<Error> {
    vec![
        Error::NullArgument { name: "out" },
        Error::invalid("X", "Name", "must not be empty"),
        Error::Decode(DecodeError {
            type_name: "X",
            path: String::new(),
            reason: "r".into(),
        }),
        Error::Io {
            context: "c".into(),
            error: std::io::Error::other("e"),
        },
        Error::Panic {
            message: "m".into(),
        },
        Error::MalformedToken { reason: "r".into() },
        Error::UnsupportedAlgorithm {
            alg: "HS256".into(),
            expected: "\"RS256\", the algorithm of key k1".into(),
        },
        Error::UnknownKey {
            kid: "k".into(),
            reason: "absent".into(),
        },
        Error::BadSignature { kid: "k".into() },
        Error::Expired {
            exp: 1,
            now: 2,
            leeway_secs: 0,
        },
        Error::NotYetValid {
            claim: "nbf",
            value: 3,
            now: 2,
            leeway_secs: 0,
        },
        Error::AudienceMismatch {
            expected: "a".into(),
            found: vec!["b".into()],
        },
        Error::IssuerMismatch {
            expected: "https://a".into(),
            found: "no iss".into(),
        },
        Error::TokenKindRefused { reason: "r".into() },
        Error::AllocationNotFound {
            alloc_id: "a".into(),
        },
        Error::AllocationTerminal {
            alloc_id: "a".into(),
            detail: String::new(),
        },
        Error::StoreUnavailable {
            alloc_id: "a".into(),
            cause: "down".into(),
        },
        Error::NodeNotFound {
            node_id: "n".into(),
        },
        Error::NodeDown {
            node_id: "n".into(),
        },
        Error::NoActiveKey {
            algorithm: crate::algorithm::Algorithm::Es256,
            purpose: crate::purpose::KeyPurpose::Wit,
        },
        Error::DuplicateKey { kid: "k".into() },
        Error::KeyringConflict {
            source_name: "/p/".into(),
            reason: "r".into(),
        },
        Error::KeyringUnavailable {
            source_name: "/p/".into(),
            cause: "c".into(),
        },
        Error::TokenExchange {
            exchange: "consul".into(),
            alloc_id: "a".into(),
            reason: "refused".into(),
        },
        Error::ProofRequired { reason: "r".into() },
        Error::ProofInvalid { reason: "r".into() },
        Error::ProofReplayed { reason: "r".into() },
        Error::KeyCustody {
            custodian: "k".into(),
            reason: "r".into(),
        },
    ]
}

#[test]
fn an_untrusted_issuer_is_issuer_mismatch() {
    let e = Error::UntrustedIssuer {
        found: "the token's iss \"https://x\" is not trusted".into(),
        trusted: "trusted: iss \"https://a\"".into(),
    };
    assert_eq!(e.code(), ResultCode::IssuerMismatch);
    assert!(e.to_string().contains("https://x"), "{e}");
}

#[test]
fn a_node_lookup_failure_is_store_unavailable_naming_the_node() {
    let e = Error::NodeStoreUnavailable {
        node_id: "n1".into(),
        cause: "down".into(),
    };
    assert_eq!(e.code(), ResultCode::StoreUnavailable);
    assert!(e.to_string().contains("checking node \"n1\""), "{e}");
}

#[test]
fn variants_map_one_to_one_onto_codes() {
    let codes: Vec<ResultCode> = one_of_each().iter().map(Error::code).collect();
    let mut expected: Vec<ResultCode> = ResultCode::ALL[1..].to_vec();
    assert_eq!(codes, expected, "variant order follows code order");
    expected.dedup();
    assert_eq!(
        expected.len(),
        ResultCode::ALL.len() - 1,
        "codes are distinct"
    );
}

/// Codes are declared in numeric order. (The pinned C list,
/// ffi/abi/constants.txt, is checked against these names and numbers
/// by the C ABI crate's header test.)
#[test]
fn codes_are_declared_in_numeric_order() {
    assert!(
        ResultCode::ALL
            .windows(2)
            .all(|w| w[0].as_u32() < w[1].as_u32())
    );
}

#[test]
fn messages_say_what_and_what_was_expected() {
    let e = Error::UnsupportedAlgorithm {
        alg: "none".into(),
        expected: crate::jwt::ACCEPTED_ALGS.into(),
    };
    assert_eq!(
        e.to_string(),
        "unsupported algorithm \"none\": expected \"EdDSA\" (or \"Ed25519\"), \"ES256\", \"RS256\", \"ES384\", \"ES512\", \"PS256\", \"PS384\", \"PS512\", \"RS384\" or \"RS512\""
    );
    let e = Error::InvalidArgument(InvalidArgument {
        subject: "WorkloadIdentity",
        problems: vec![
            FieldProblem {
                field: "Name".into(),
                problem: "must match ^[a-zA-Z0-9-_]{1,128}$, got \"a b\"".into(),
            },
            FieldProblem {
                field: "TTL".into(),
                problem: "must be >= 0, got -1".into(),
            },
        ],
    });
    assert_eq!(
        e.to_string(),
        "invalid WorkloadIdentity: Name: must match ^[a-zA-Z0-9-_]{1,128}$, got \"a b\"; TTL: must be >= 0, got -1"
    );
}

/// A chain printer (anyhow's `{:#}`, a C caller's message) says the OS
/// error once: in the message, not again as the source.
#[test]
fn an_io_error_says_its_os_error_once() {
    let e = Error::Io {
        context: "writing keystore /x".into(),
        error: std::io::Error::from_raw_os_error(13),
    };
    let shown = e.to_string();
    assert!(shown.starts_with("writing keystore /x: "), "{shown}");
    assert!(shown.contains("os error 13"), "{shown}");
    assert!(std::error::Error::source(&e).is_none());
}
