//! [`Explanation::to_json`]: an explanation as JSON, in the one shape every
//! front end prints (`wid inspect --json` under `"verification"`, and
//! `wid_explain` in the C ABI), so the two cannot drift apart.

use serde_json::{Map, Value, json};

use super::Explanation;

impl Explanation {
    /// The explanation as a JSON object:
    /// `{"accepted":false,"code":"WID_RESULT_EXPIRED","steps":[{"detail":"...","name":"length","passed":true},...]}`.
    /// `steps` lists every step run, in order; `code` is the name of the
    /// verdict's result code (`null` when the token was accepted); a trust
    /// set's explanation adds `"issuer"`, the trusted issuer it chose.
    pub fn to_json(&self) -> String {
        Value::Object(self.json_members()).to_string()
    }

    /// The members of [`Explanation::to_json`]'s object, for front ends that
    /// add their own beside them.
    pub(crate) fn json_members(&self) -> Map<String, Value> {
        let steps: Vec<Value> = self
            .steps
            .iter()
            .map(|s| json!({"name": s.name, "passed": s.passed, "detail": s.detail}))
            .collect();
        let mut members = Map::new();
        members.insert("steps".into(), Value::Array(steps));
        members.insert("accepted".into(), Value::Bool(self.result.is_ok()));
        members.insert(
            "code".into(),
            self.result
                .as_ref()
                .err()
                .map_or(Value::Null, |e| Value::from(e.code().name())),
        );
        // Only a trust set's explanation names its issuer: a plain
        // verifier's JSON stays as it was.
        if let Some(issuer) = &self.issuer {
            members.insert("issuer".into(), Value::from(issuer.as_str()));
        }
        members
    }
}

#[cfg(test)]
mod tests {
    use super::super::VerificationStep;
    use super::*;
    use crate::error::Error;

    /// How `wid inspect --json` rendered these members before it used
    /// `to_json`: its output must stay byte-identical.
    fn as_inspect_rendered_them(x: &Explanation) -> String {
        json!({
            "steps": x.steps.iter().map(|s| json!({
                "name": s.name, "passed": s.passed, "detail": s.detail,
            })).collect::<Vec<_>>(),
            "accepted": x.result.is_ok(),
            "code": x.result.as_ref().err().map(|e| e.code().name()),
        })
        .to_string()
    }

    #[test]
    fn the_same_bytes_as_inspect_printed() {
        use crate::issue::Issuer;
        use crate::keyring::Keyring;
        use crate::model::{Allocation, IssueRequest, WorkloadIdentity};
        use crate::state::MemoryStore;
        use crate::verify::{Audience, Verifier};
        let now = 1_700_000_000;
        let keyring = Keyring::new();
        keyring.rotate(now).unwrap();
        let req = IssueRequest {
            region: "global".into(),
            allocation: Allocation {
                id: "alloc-1".into(),
                namespace: "default".into(),
                job_id: "web".into(),
                task_group: "g".into(),
                client_status: "running".into(),
                ..Allocation::default()
            },
            task: "server".into(),
            identity: WorkloadIdentity {
                name: "default".into(),
                audience: vec!["vault.io".into()],
                ttl: crate::model::GoDuration::from_secs(3600),
                ..WorkloadIdentity::default()
            },
            ..IssueRequest::default()
        };
        let token = Issuer::new(keyring.clone()).issue(&req, now).unwrap().token;
        let store = std::sync::Arc::new(MemoryStore::new());
        store.upsert(&req.allocation);
        let v = Verifier::builder(keyring, store, Audience::new("vault.io").unwrap()).build();
        for (t, at) in [
            (token.as_str(), now),
            (token.as_str(), now + 7200),
            ("not.a.token", now),
            ("", now),
        ] {
            let x = v.explain(t, at);
            assert_eq!(x.to_json(), as_inspect_rendered_them(&x));
        }
    }

    #[test]
    fn steps_verdict_and_code() {
        let x = Explanation {
            steps: vec![
                VerificationStep {
                    name: "length",
                    passed: true,
                    detail: "12 bytes".into(),
                },
                VerificationStep {
                    name: "structure",
                    passed: false,
                    detail: "a \"quoted\" reason".into(),
                },
            ],
            result: Err(Error::MalformedToken {
                reason: "a \"quoted\" reason".into(),
            }),
            issuer: None,
        };
        assert_eq!(
            x.to_json(),
            r#"{"accepted":false,"code":"WID_RESULT_MALFORMED_TOKEN","steps":[{"detail":"12 bytes","name":"length","passed":true},{"detail":"a \"quoted\" reason","name":"structure","passed":false}]}"#
        );
    }
}
