//! Tokens: parsing, the whole verification pipeline, and algorithm confusion.

use super::world::{KIDS, NOW, World, b64, world};
use crate::keyring::Algorithm;

/// Token parsing alone; the input as a claims payload must read the same by
/// the claims scan and by serde.
pub fn jwt_decode(data: &[u8]) {
    let _ = crate::jwt::parse(data, crate::jwt::DEFAULT_MAX_TOKEN_BYTES);
    claims_paths_agree(data);
}

/// Wherever the claims scan accepts a payload, serde reads the same claims.
fn claims_paths_agree(payload: &[u8]) {
    if let Some(fast) = crate::claims::canonical::parse(payload) {
        let slow = serde_json::from_slice::<crate::claims::Claims>(payload).ok();
        assert_eq!(
            slow.as_ref(),
            Some(&fast),
            "the claims scan and serde disagree"
        );
    }
}

const FIXED_PAYLOAD: &[u8] =
    br#"{"nomad_allocation_id":"5f8c7d2e-3b1a-4c6d-9e0f-123456789abc","aud":"vault.io"}"#;

/// The whole verification pipeline. A first byte of 0, 2 or 3 makes the rest a
/// payload signed with the real EdDSA, ES256 or RS256 key (so claims parsing is
/// reached with a valid signature); 1 makes it a header signed by the EdDSA key
/// with a fixed payload (4 and 5: by the ES256 and RS256 keys); anything else
/// is a token as is. Single, batch and cached verification must agree.
/// Returns whether the token was accepted.
pub fn verify(data: &[u8]) -> bool {
    let w = world();
    let header_for = |alg: Algorithm| {
        let kid = KIDS.iter().find(|(_, a)| *a == alg).map_or("", |(k, _)| *k);
        format!(r#"{{"alg":"{}","kid":"{kid}","typ":"JWT"}}"#, alg.name()).into_bytes()
    };
    if let Some((0 | 2 | 3, payload)) = data.split_first() {
        claims_paths_agree(payload);
    }
    let token: Vec<u8> = match data.split_first() {
        Some((0, payload)) => signed(w, Algorithm::EdDsa, &header_for(Algorithm::EdDsa), payload),
        Some((2, payload)) => signed(w, Algorithm::Es256, &header_for(Algorithm::Es256), payload),
        Some((3, payload)) => signed(w, Algorithm::Rs256, &header_for(Algorithm::Rs256), payload),
        Some((1, header)) => signed(w, Algorithm::EdDsa, header, FIXED_PAYLOAD),
        Some((4, header)) => signed(w, Algorithm::Es256, header, FIXED_PAYLOAD),
        Some((5, header)) => signed(w, Algorithm::Rs256, header, FIXED_PAYLOAD),
        _ => data.to_vec(),
    };
    verdicts_agree(w, &token)
}

/// Verifies `token` singly, cached and in a batch; the verdicts must agree.
pub(super) fn verdicts_agree(w: &World, token: &[u8]) -> bool {
    let single = w.verifier.verify_bytes(token, NOW);
    let cached = w.cached.verify_bytes(token, NOW);
    assert_eq!(
        single.as_ref().map_err(|e| e.code()),
        cached.as_ref().map_err(|e| e.code()),
        "cache changed the verdict"
    );
    if let Ok(text) = std::str::from_utf8(token) {
        let batch = w.verifier.verify_batch(&[text], NOW);
        assert_eq!(
            single.as_ref().map_err(|e| e.code()),
            batch[0].as_ref().map_err(|e| e.code()),
            "batch changed the verdict"
        );
        // explain runs the same checks step by step and prints each (its
        // time arithmetic once overflowed on extreme dates).
        let explained = w.verifier.explain(text, NOW);
        assert_eq!(
            single.as_ref().map_err(|e| e.code()),
            explained.result.as_ref().map_err(|e| e.code()),
            "explain changed the verdict"
        );
        for step in &explained.steps {
            std::hint::black_box(format!("{step:?}"));
        }
    }
    // The claims decide the kind: what the allocation-only verifier
    // accepts, the verifier of both kinds accepts as an allocation token;
    // a node token it accepts, the allocation-only verifier refuses.
    let both = w.nodes.verify_bytes(token, NOW);
    match (&single, &both) {
        (Ok(a), b) => assert!(
            b.as_ref()
                .is_ok_and(|b| b.claims == a.claims && b.claims.node.is_none()),
            "an allocation token changed verdict when node tokens are accepted: {b:?}"
        ),
        (Err(e), Ok(b)) => {
            assert!(b.claims.node.is_some(), "{e}");
            assert_eq!(e.code(), crate::error::ResultCode::TokenKindRefused, "{e}");
        }
        (Err(_), Err(_)) => {}
    }
    single.is_ok()
}

fn signed(w: &World, alg: Algorithm, header: &[u8], payload: &[u8]) -> Vec<u8> {
    let input = format!("{}.{}", b64(header), b64(payload));
    let sig = match w
        .keyring
        .active_for(alg)
        .and_then(|k| k.sign(input.as_bytes()))
    {
        Ok(sig) => sig,
        Err(_) => return input.into_bytes(),
    };
    format!("{input}.{}", b64(&sig)).into_bytes()
}
