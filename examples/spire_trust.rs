//! We trust SPIRE (scripts/spire-interop.sh runs this against a real
//! SPIRE server): a `SpiffeBundleSource` reads SPIRE's own bundle endpoint
//! (profile `https_web`, its certificate from the test CA), a trust set
//! verifies the JWT-SVIDs `spire-server jwt mint` makes, and follows SPIRE's
//! JWT authority rotation (`spire-server localauthority jwt prepare /
//! activate / taint / revoke`): the new authority's tokens verify with no
//! restart, and the revoked one's are refused once the bundle is fetched
//! again. Prints what it saw at each step; exits 1 on the first check that
//! does not hold.
//!
//! `cargo run --example spire_trust --features remote-jwks -- SPIRE_SERVER_BIN
//! SERVER_SOCKET TRUST_DOMAIN BUNDLE_URL CA_PEM`

use std::process::Command;

use workload_identity::{
    Audience, IssuerId, ResultCode, SpiffeBundleSource, TrustSet, TrustedIssuer,
};

const AUD: &str = "wid-trusts-spire";

struct Spire {
    bin: String,
    socket: String,
    trust_domain: String,
}

impl Spire {
    /// `spire-server ARGS -socketPath SOCKET`, its stdout; a failure ends
    /// the run with what SPIRE said.
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new(&self.bin)
            .args(args)
            .args(["-socketPath", &self.socket])
            .output()
            .unwrap_or_else(|e| fail(&format!("{}: {e}", self.bin)));
        if !out.status.success() {
            fail(&format!(
                "spire-server {}: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A JWT-SVID for spiffe://TD/billing, as `spire-server jwt mint` prints it.
    fn mint(&self) -> String {
        let id = format!("spiffe://{}/billing", self.trust_domain);
        let out = self.run(&[
            "jwt",
            "mint",
            "-spiffeID",
            &id,
            "-audience",
            AUD,
            "-ttl",
            "5m",
        ]);
        out.split_whitespace()
            .find(|w| w.matches('.').count() == 2)
            .unwrap_or_else(|| fail(&format!("jwt mint printed no token: {out}")))
            .to_string()
    }

    /// The JWT authorities (`localauthority jwt show -output json`): the
    /// authority IDs of the active, prepared and old ones.
    fn authorities(&self) -> serde_json::Value {
        let out = self.run(&["localauthority", "jwt", "show", "-output", "json"]);
        serde_json::from_str(&out).unwrap_or_else(|e| fail(&format!("jwt show: {e}: {out}")))
    }
}

fn fail(why: &str) -> ! {
    eprintln!("spire_trust: FAIL: {why}");
    std::process::exit(1)
}

fn check(ok: bool, why: &str) {
    if !ok {
        fail(why);
    }
}

fn kid_of(token: &str) -> String {
    use base64::Engine;
    let header = token.split('.').next().unwrap_or_default();
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .unwrap_or_default();
    serde_json::from_slice::<serde_json::Value>(&json)
        .ok()
        .and_then(|h| h["kid"].as_str().map(String::from))
        .unwrap_or_default()
}

fn authority_id(v: &serde_json::Value, which: &str) -> String {
    v[which]["authority_id"]
        .as_str()
        .unwrap_or_else(|| fail(&format!("no {which} JWT authority in {v}")))
        .to_string()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bin, socket, trust_domain, url, ca] = args.as_slice() else {
        fail("usage: spire_trust SPIRE_SERVER_BIN SERVER_SOCKET TRUST_DOMAIN BUNDLE_URL CA_PEM");
    };
    let spire = Spire {
        bin: bin.clone(),
        socket: socket.clone(),
        trust_domain: trust_domain.clone(),
    };
    let ca = std::fs::read(ca).unwrap_or_else(|e| fail(&format!("{ca}: {e}")));
    let source = SpiffeBundleSource::builder(trust_domain, url)
        .ca_bundle_pem(&ca)
        .build()
        .unwrap_or_else(|e| fail(&e.to_string()));
    let report = source
        .refresh()
        .unwrap_or_else(|e| fail(&format!("SPIRE's bundle endpoint {url} (https_web): {e}")));
    println!(
        "  SpiffeBundleSource read SPIRE's bundle ({url}): sequence {:?}, JWT authorities {:?}",
        report.sequence, report.keys
    );
    let trust = TrustSet::builder()
        .issuer(TrustedIssuer::foreign(
            IssuerId::trust_domain(trust_domain).unwrap_or_else(|e| fail(&e.to_string())),
            source.keyring().clone(),
            Audience::new(AUD).unwrap(),
        ))
        .build()
        .unwrap_or_else(|e| fail(&e.to_string()));
    let now = || workload_identity::unix_now();
    let verify = |token: &str| trust.verify(token, now());

    let first = spire.mint();
    let verified = verify(&first).unwrap_or_else(|e| fail(&format!("jwt mint's token: {e}")));
    println!(
        "  a JWT-SVID from `spire-server jwt mint` (kid {}) verifies: sub {}",
        kid_of(&first),
        verified.identity.claims.subject
    );

    // SPIRE's own rotation of its JWT authority.
    let before = spire.authorities();
    let old = authority_id(&before, "active");
    let prepared = spire.run(&["localauthority", "jwt", "prepare", "-output", "json"]);
    let new = authority_id(
        &serde_json::from_str(&prepared).unwrap_or_else(|e| fail(&format!("{e}: {prepared}"))),
        "prepared_authority",
    );
    println!("  localauthority jwt prepare: {new} (active {old})");
    spire.run(&["localauthority", "jwt", "activate", "-authorityID", &new]);
    let second = spire.mint();
    check(
        kid_of(&second) == new,
        "jwt mint after activate signed with another authority",
    );
    // A token of the new authority: its kid is unknown until the source
    // fetches again, which the unknown kid itself starts.
    match verify(&second) {
        Ok(_) => println!(
            "  after activate: the new authority's token (kid {new}) verifies without a restart"
        ),
        Err(e) => {
            source
                .refresh()
                .unwrap_or_else(|e| fail(&format!("refetch after activate: {e}")));
            verify(&second).unwrap_or_else(|e2| {
                fail(&format!(
                    "the new authority's token after a refetch: {e2} (first: {e})"
                ))
            });
            println!(
                "  after activate and a refetch: the new authority's token (kid {new}) verifies"
            );
        }
    }
    spire.run(&["localauthority", "jwt", "taint", "-authorityID", &old]);
    spire.run(&["localauthority", "jwt", "revoke", "-authorityID", &old]);
    let report = source
        .refresh()
        .unwrap_or_else(|e| fail(&format!("refetch after revoke: {e}")));
    println!(
        "  after taint and revoke of {old}: sequence {:?}, JWT authorities {:?}",
        report.sequence, report.keys
    );
    check(
        !report.keys.iter().any(|k| k.as_str() == old),
        "the revoked authority is still in SPIRE's bundle",
    );
    match verify(&first) {
        Ok(_) => fail("the revoked authority's token still verifies"),
        Err(e) => {
            check(
                e.code() == ResultCode::UnknownKey,
                &format!("refused for another reason: {e}"),
            );
            println!("  the revoked authority's token is refused: {e}");
        }
    }
    verify(&second)
        .unwrap_or_else(|e| fail(&format!("the new authority's token after revoke: {e}")));
    println!("spire_trust: OK");
}
