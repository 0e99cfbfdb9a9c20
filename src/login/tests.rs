//! The login core on its own: its schedule, and a third login built on it
//! from its server's parts alone.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zeroize::Zeroizing;

use super::*;
use crate::manager::{IdentityManager, MemoryIdentityDb};

/// Two thirds into a token's life, and never later than `min_ttl` before
/// its end; a token shorter than `min_ttl` at two thirds; never sooner
/// than a second; a token that never expires is never looked at again.
#[test]
fn refresh_is_scheduled_before_the_end_of_a_tokens_life() {
    let l = Login {
        common: common(IdentityId::new("web", "id"), "x", Duration::from_secs(30)),
        server: (),
    };
    let at = |left_ms| {
        l.refresh_time(
            &Life {
                left_ms: Some(left_ms),
            },
            NOW,
        )
    };
    // 1 h: two thirds (40 min) is earlier than 30 s before the end.
    assert_eq!(at(3_600_000), Some(NOW + 2_400_000));
    // 60 s: two thirds is 40 s, but 30 s before the end is 30 s.
    assert_eq!(at(60_000), Some(NOW + 30_000));
    // 20 s, shorter than min_ttl: two thirds.
    assert_eq!(at(20_000), Some(NOW + 13_333));
    // Expired or nearly: a second (never a busy loop).
    assert_eq!(at(0), Some(NOW + 1000));
    assert_eq!(at(-5_000), Some(NOW + 1000));
    assert_eq!(
        l.refresh_time(
            &Life {
                left_ms: Some(i64::MAX)
            },
            i64::MAX - 10
        ),
        Some(i64::MAX)
    );
    assert_eq!(l.refresh_time(&Life { left_ms: None }, NOW), None);
}

const NOW: i64 = 1_700_000_000_000;

/// A server for `()`: only the schedule is tested with it.
impl Server for () {
    const KIND: &'static str = "test";
    const LOOK_UP: &'static str = "look";
    const RENEW: Option<&'static str> = None;
    const REVOKING: &'static str = "revoking";
    const LIVES_UNTIL: &'static str = "it ends";
    fn origin(&self) -> String {
        String::new()
    }
    fn logs_in_as(&self) -> String {
        String::new()
    }
    fn login(&self, _: &IdentityToken, _: i64) -> Result<LoggedIn, ExchangeError> {
        Err(ExchangeError("no server".into()))
    }
    fn renew(&self, _: &str) -> Result<Life, Refusal> {
        Err(Refusal::Other(ExchangeError("no server".into())))
    }
    fn look_up(&self, _: &str, _: i64) -> Result<Saved, Refusal> {
        Err(Refusal::Other(ExchangeError("no server".into())))
    }
    fn revoke(&self, _: &str) -> Result<(), Refusal> {
        Ok(())
    }
}

// A third login, as a Kubernetes TokenRequest exchange would be written:
// only its server's parts (here an in-memory server that mints tokens of
// 10 minutes, which do not renew). Everything else (the schedule, restore
// and confirm, replace then revoke, saving, ending the allocation) is the
// core's.

/// The server: tokens it minted, and when each ends (Unix ms).
#[derive(Clone, Default)]
struct Minted(Arc<Mutex<BTreeMap<String, i64>>>);

impl Server for Minted {
    const KIND: &'static str = "TokenRequest login";
    const LOOK_UP: &'static str = "TokenReview";
    const RENEW: Option<&'static str> = None;
    const REVOKING: &'static str = "deleting";
    const LIVES_UNTIL: &'static str = "its expirationTimestamp";
    fn origin(&self) -> String {
        "kubernetes https://k8s.test; audience vault".into()
    }
    fn logs_in_as(&self) -> String {
        "for audience \"vault\"".into()
    }
    fn login(&self, t: &IdentityToken, now_ms: i64) -> Result<LoggedIn, ExchangeError> {
        let mut minted = self.0.lock().unwrap();
        let secret = format!("sa-{}-{}", t.jwt_id, minted.len() + 1);
        minted.insert(secret.clone(), now_ms + 600_000);
        Ok((
            Zeroizing::new(secret),
            Life {
                left_ms: Some(600_000),
            },
        ))
    }
    fn renew(&self, _: &str) -> Result<Life, Refusal> {
        unreachable!("RENEW is None")
    }
    fn look_up(&self, secret: &str, now_ms: i64) -> Result<Saved, Refusal> {
        match self.0.lock().unwrap().get(secret) {
            Some(end) if *end > now_ms => Ok(Saved::Alive(Life {
                left_ms: Some(end - now_ms),
            })),
            _ => Err(Refusal::TokenRefused("unknown or expired".into())),
        }
    }
    fn revoke(&self, secret: &str) -> Result<(), Refusal> {
        self.0.lock().unwrap().remove(secret);
        Ok(())
    }
}

struct TokenRequestLogin {
    login: Login<Minted>,
}
crate::login::login_exchange!(TokenRequestLogin);

#[test]
fn a_third_login_is_its_servers_parts_on_the_core() {
    let minted = Minted::default();
    let keyring = crate::keyring::Keyring::new();
    keyring.rotate(NOW / 1000).unwrap();
    let req = crate::model::IssueRequest {
        region: "global".into(),
        task: "server".into(),
        allocation: crate::model::Allocation {
            id: "alloc-1".into(),
            namespace: "default".into(),
            job_id: "web".into(),
            task_group: "g".into(),
            ..Default::default()
        },
        identity: crate::model::WorkloadIdentity {
            name: "k8s".into(),
            audience: vec!["vault".into()],
            ttl: Duration::from_secs(3600).into(),
            ..Default::default()
        },
        ..Default::default()
    };
    let db = Arc::new(MemoryIdentityDb::default());
    let manager = |minted: &Minted| {
        let login = TokenRequestLogin {
            login: Login {
                common: common(
                    IdentityId::new("server", "k8s"),
                    "k8s",
                    Duration::from_secs(60),
                ),
                server: minted.clone(),
            },
        };
        IdentityManager::builder(
            vec![req.clone()],
            Arc::new(crate::issue::Issuer::new(keyring.clone())),
            db.clone(),
            keyring.clone(),
        )
        .exchange(Arc::new(login))
        .build()
        .unwrap()
    };
    let live = || minted.0.lock().unwrap().keys().cloned().collect::<Vec<_>>();

    // Start: one login; its refresh due two thirds into its 10 minutes.
    let m = manager(&minted);
    m.start(NOW).unwrap();
    let first = m.secret("k8s").unwrap().secret.clone();
    assert_eq!(live(), std::slice::from_ref(&first));
    assert_eq!(m.next_due_ms(), Some(NOW + 400_000));
    // Due: its tokens do not renew, so a new login, and the old one deleted.
    m.tick(NOW + 400_000);
    let second = m.secret("k8s").unwrap().secret.clone();
    assert_ne!(second, first);
    assert_eq!(live(), std::slice::from_ref(&second));
    // A restart: the saved token is confirmed (TokenReview) and kept.
    let m = manager(&minted);
    assert!(m.restore(NOW + 500_000).unwrap().reused);
    assert_eq!(m.secret("k8s").unwrap().secret, second);
    // Deleted on the server while the host was down: a restore logs in
    // again instead of handing it out.
    minted.0.lock().unwrap().clear();
    let m = manager(&minted);
    let r = m.restore(NOW + 510_000).unwrap();
    assert_eq!(r.rederived, ["k8s"]);
    let third = m.secret("k8s").unwrap().secret.clone();
    assert_eq!(live(), [third]);
    // The allocation ends: its token deleted, its state gone.
    m.end_allocation().unwrap();
    assert!(live().is_empty());
    assert!(
        crate::manager::IdentityDb::load(&*db, "alloc-1")
            .unwrap()
            .is_none()
    );
}

/// The shared part of a test login named `name` for `identity`.
fn common(identity: IdentityId, name: &str, min_ttl: Duration) -> Common {
    Settings::new("https://k8s.test", identity, name, min_ttl)
        .finish("TestLogin")
        .unwrap()
        .common
}

/// Checks a login's wording of its server's refusals against the cases of
/// `tests/vectors/login_refusals/<file>` (the server's status and text,
/// and a part of what the wording must name): `refuse(status, said)` names
/// it, keeps the server's own words and its status, and says "no error
/// text" for an empty answer.
pub(crate) fn check_refusals(file: &str, refuse: impl Fn(u16, &str) -> ExchangeError) {
    #[derive(serde::Deserialize)]
    struct Case {
        status: u16,
        said: String,
        names: String,
    }
    #[derive(serde::Deserialize)]
    struct Cases {
        cases: Vec<Case>,
    }
    let path = format!(
        "{}/tests/vectors/login_refusals/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let Cases { cases } = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(cases.len() >= 10, "{path}: {} cases", cases.len());
    for Case {
        status,
        said,
        names,
    } in &cases
    {
        let e = refuse(*status, said);
        assert!(e.0.contains(names.as_str()), "{said}: {e}");
        assert!(
            e.0.contains(said.as_str()),
            "the server's own words are kept: {e}"
        );
        assert!(e.0.contains(&format!("HTTP {status}")), "{e}");
    }
    let e = refuse(400, "");
    assert!(e.0.contains("no error text"), "{e}");
}
