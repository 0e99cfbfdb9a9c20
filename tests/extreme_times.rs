//! Properties: a signed token's time claims may hold any integer, and `now`
//! and the leeway may be anywhere in range. `verify`, `verify_batch`,
//! `explain` and the cache's hit path never overflow (these tests run in
//! debug builds, where an overflow panics), agree with each other, and agree
//! with an oracle computed in 128-bit arithmetic; `explain` prints each
//! claim's true distance from `now`.

mod common;

use std::time::Duration;

use proptest::prelude::*;
use serde_json::json;
use workload_identity::{Audience, ResultCode, Verifier};

use common::identity::{AUD, HEADER, payload_with, world};

/// Values at and next to every edge, and anything else.
fn time() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(i64::MIN),
        Just(i64::MIN + 1),
        Just(-1i64),
        Just(0i64),
        Just(1i64),
        Just(common::identity::NOW),
        Just(i64::MAX - 1),
        Just(i64::MAX),
        any::<i64>(),
    ]
}

fn leeway() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(60u64),
        Just(i64::MAX as u64),
        Just(u64::MAX),
        any::<u64>()
    ]
}

/// What the rules say, in exact arithmetic: expired when `now >= exp +
/// leeway`; too early when `nbf` or `iat` `> now + leeway`.
fn oracle(
    exp: Option<i64>,
    nbf: Option<i64>,
    iat: Option<i64>,
    now: i64,
    leeway: i64,
) -> ResultCode {
    let (now, leeway) = (i128::from(now), i128::from(leeway));
    if exp.is_some_and(|e| now >= i128::from(e) + leeway) {
        return ResultCode::Expired;
    }
    if [nbf, iat]
        .into_iter()
        .flatten()
        .any(|v| i128::from(v) > now + leeway)
    {
        return ResultCode::NotYetValid;
    }
    ResultCode::Ok
}

fn code<T>(r: &Result<T, workload_identity::Error>) -> ResultCode {
    match r {
        Ok(_) => ResultCode::Ok,
        Err(e) => e.code(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn extreme_time_claims_never_overflow_and_every_path_agrees(
        exp in proptest::option::of(time()),
        nbf in proptest::option::of(time()),
        iat in proptest::option::of(time()),
        now in time(),
        leeway_secs in leeway(),
    ) {
        let w = world();
        let opt = |v: Option<i64>| v.map_or(serde_json::Value::Null, |t| json!(t));
        let token = w.sign_json(
            HEADER,
            &payload_with(json!({"exp": opt(exp), "nbf": opt(nbf), "iat": opt(iat)})),
        );
        let build = |cache: bool| {
            let b = Verifier::builder(w.keyring.clone(), w.store.clone(), Audience::new(AUD).unwrap())
                .leeway(Duration::from_secs(leeway_secs))
                .key_wait(Duration::ZERO);
            if cache { b.cache(16) } else { b }.build()
        };
        let plain = build(false);
        let cached = build(true);
        let leeway = i64::try_from(leeway_secs).unwrap_or(i64::MAX);
        let want = oracle(exp, nbf, iat, now, leeway);

        let single = plain.verify(&token, now);
        prop_assert_eq!(code(&single), want, "verify: {:?}", single);
        let batch = plain.verify_batch(&[token.as_str(), token.as_str()], now);
        for r in &batch {
            prop_assert_eq!(code(r), want, "verify_batch: {:?}", r);
        }
        // The cache: a first verification fills it (when accepted), and
        // the hit path then gives the same answer at every other `now`.
        prop_assert_eq!(code(&cached.verify(&token, now)), want);
        for later in [now, now.saturating_add(1), i64::MAX, i64::MIN] {
            let again = cached.verify(&token, later);
            prop_assert_eq!(code(&again), oracle(exp, nbf, iat, later, leeway), "cache hit at {}", later);
        }

        let explained = plain.explain(&token, now);
        prop_assert_eq!(code(&explained.result), want);
        if want == ResultCode::Ok {
            let times = explained.steps.iter().find(|s| s.name == "times").unwrap();
            for (name, value) in [("exp", exp), ("nbf", nbf), ("iat", iat)] {
                let Some(t) = value else {
                    prop_assert!(times.detail.contains(&format!("no {name}")), "{}", times.detail);
                    continue;
                };
                let d = i128::from(t) - i128::from(now);
                let shown = if d >= 0 {
                    format!("{name} {t} (in {d} s)")
                } else {
                    format!("{name} {t} ({} s ago)", -d)
                };
                prop_assert!(times.detail.contains(&shown), "want {:?} in {:?}", shown, times.detail);
            }
        }
    }
}
