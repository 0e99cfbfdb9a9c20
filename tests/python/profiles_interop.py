#!/usr/bin/env python3
"""profiles_interop.py -- the token profiles (issue 30) against independent stacks.

    python3 tests/python/profiles_interop.py PATH/TO/wid

Needs PyPI `PyJWT`, `cryptography` and `spiffe` (py-spiffe, the SPIFFE
project's Python library). Run by scripts/profiles-interop.sh.

  a. py-spiffe accepts our JWT-SVIDs: `wid keyring jwks --format spiffe` is
     parsed by spiffe.JwtBundle.parse, and tokens from `wid issue
     --spiffe-trust-domain` (ES256 and RS256) pass JwtSvid.parse_and_validate
     (signature, aud, exp, a SPIFFE ID sub of the bundle's trust domain); a
     token of another trust domain, another audience or tampered with is
     refused. The bundle's keys carry "use":"jwt-svid" and the bundle a
     spiffe_refresh_hint.
  b. PyJWT reads the extra claims: a token from `wid issue
     --extra-claims-policy` verifies with PyJWT from `wid keyring jwks`, and
     its extra_claims object holds the rendered templates.
  c. The committed golden tokens (tests/vectors/profiles.json) verify with
     PyJWT from the JWKS in that file (time checks off: they are fixed in
     time), with the payloads the file records.

Prints `ok <name>` or `FAIL <name>: details` per check; exits 1 on any failure.
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import traceback

import jwt
from spiffe import JwtBundle, JwtSvid, TrustDomain

ROOT = pathlib.Path(__file__).resolve().parents[2]
TD = "prod.example.org"
RESULTS = []


def check(name):
    def wrap(fn):
        try:
            fn()
            print(f"ok {name}")
            RESULTS.append(True)
        except Exception as e:  # noqa: BLE001 -- report every failure
            print(f"FAIL {name}: {e!r}")
            traceback.print_exc()
            RESULTS.append(False)
        return fn

    return wrap


def run(wid, *args, stdin=None):
    p = subprocess.run(
        [wid, *args], input=stdin, capture_output=True, text=True, check=False
    )
    if p.returncode != 0:
        raise RuntimeError(f"wid {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p.stdout


REQUEST = {
    "Region": "global",
    "Allocation": {
        "ID": "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc",
        "Namespace": "default",
        "JobID": "web",
        "TaskGroup": "frontend",
        "ClientStatus": "running",
        "Job": {"ID": "web", "Meta": {"owner": "team-a"}},
    },
    "Node": {"ID": "9d1e6a44-1111-2222-3333-444444444444", "Datacenter": "dc1"},
    "Task": "server",
    "Identity": {
        "Name": "default",
        "Audience": ["spiffe-validator"],
        "TTL": "10m",
        "ExtraClaims": ["dc", "owner"],
    },
}

POLICY = {
    "namespaces": {
        "default": {
            "required_extra_claims": {"unique_id": "${job.region}:${job.namespace}:${job.id}"},
            "optional_extra_claims": {
                "dc": "dc:${node.datacenter}",
                "owner": "${job.meta.owner}",
            },
        }
    }
}

WANT_EXTRA = {"dc": "dc:dc1", "owner": "team-a", "unique_id": "global:default:web"}


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    wid = sys.argv[1]
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="profiles-interop."))
    ks = str(tmp / "keystore")
    run(wid, "keyring", "init", "--keystore", ks)
    for alg in ("ES256", "RS256"):
        run(wid, "keyring", "rotate", "--keystore", ks, "--alg", alg)
    req = tmp / "request.json"
    req.write_text(json.dumps(REQUEST))
    pol = tmp / "policy.json"
    pol.write_text(json.dumps(POLICY))

    def issue(alg, *extra):
        return run(
            wid, "issue", "--keystore", ks, "--request", str(req), "--alg", alg,
            "--extra-claims-policy", str(pol), *extra,
        ).strip()

    bundle_json = run(wid, "keyring", "jwks", "--keystore", ks, "--format", "spiffe")
    jwks_json = run(wid, "keyring", "jwks", "--keystore", ks)

    @check("a. the SPIFFE bundle: ES256 and RS256 keys, use jwt-svid, a refresh hint")
    def _():
        b = json.loads(bundle_json)
        assert b["spiffe_refresh_hint"] == 300, b
        assert sorted(k["alg"] for k in b["keys"]) == ["ES256", "RS256"], b
        assert all(k["use"] == "jwt-svid" for k in b["keys"]), b
        # The plain JWKS also has the EdDSA key `keyring init` made.
        assert any(k["kty"] == "OKP" for k in json.loads(jwks_json)["keys"])

    bundle = JwtBundle.parse(TrustDomain(TD), bundle_json.encode())

    for alg in ("ES256", "RS256"):
        @check(f"a. py-spiffe validates our {alg} JWT-SVID")
        def _(alg=alg):
            token = issue(alg, "--spiffe-trust-domain", TD)
            svid = JwtSvid.parse_and_validate(token, bundle, {"spiffe-validator"})
            assert str(svid.spiffe_id) == (
                f"spiffe://{TD}/global/default/web/frontend/server/default"
            ), svid.spiffe_id
            assert svid.audience == {"spiffe-validator"}, svid.audience
            assert svid.expiry > 0, svid.expiry
            # py-spiffe keeps no other claims: read them with PyJWT (the
            # signature was just checked).
            claims = jwt.decode(token, options={"verify_signature": False})
            assert claims["extra_claims"] == WANT_EXTRA, claims

        @check(f"a. py-spiffe refuses a wrong audience, trust domain or signature ({alg})")
        def _(alg=alg):
            token = issue(alg, "--spiffe-trust-domain", TD)
            for why, tok, aud, b in [
                ("audience", token, {"someone-else"}, bundle),
                ("trust domain", issue(alg, "--spiffe-trust-domain", "other.example.org"),
                 {"spiffe-validator"}, bundle),
                ("signature", token[:-4] + ("AAAA" if token[-4:] != "AAAA" else "BBBB"),
                 {"spiffe-validator"}, bundle),
            ]:
                try:
                    JwtSvid.parse_and_validate(tok, b, aud)
                except Exception:  # noqa: BLE001 -- any refusal will do
                    continue
                raise AssertionError(f"a token with the wrong {why} was accepted")

    @check("a. wid refuses an EdDSA JWT-SVID")
    def _():
        p = subprocess.run(
            [wid, "issue", "--keystore", ks, "--request", str(req),
             "--extra-claims-policy", str(pol), "--spiffe-trust-domain", TD],
            capture_output=True, text=True, check=False,
        )
        assert p.returncode != 0 and "ES256 or RS256" in p.stderr, p.stderr

    @check("b. PyJWT verifies a token with extra claims and reads them")
    def _():
        token = issue("EdDSA")
        keys = {k["kid"]: jwt.PyJWK(k) for k in json.loads(jwks_json)["keys"]}
        kid = jwt.get_unverified_header(token)["kid"]
        claims = jwt.decode(
            token, keys[kid].key, algorithms=["EdDSA"], audience="spiffe-validator",
        )
        assert claims["extra_claims"] == WANT_EXTRA, claims
        assert claims["sub"] == "global:default:web:frontend:server:default", claims

    @check("c. the committed golden tokens verify with PyJWT")
    def _():
        doc = json.loads((ROOT / "tests/vectors/profiles.json").read_text())
        keys = {k["kid"]: jwt.PyJWK(k) for k in doc["jwks"]["keys"]}
        for name, g in doc["tokens"].items():
            header = jwt.get_unverified_header(g["token"])
            claims = jwt.decode(
                g["token"], keys[header["kid"]].key, algorithms=[header["alg"]],
                options={"verify_exp": False, "verify_iat": False, "verify_nbf": False,
                         "verify_aud": False},
            )
            assert claims == g["payload"], (name, claims)
        assert doc["tokens"]["jwt_svid"]["payload"]["sub"].startswith(f"spiffe://{TD}/")
        assert jwt.get_unverified_header(doc["tokens"]["jwt_svid"]["token"])["alg"] == "ES256"

    failed = RESULTS.count(False)
    print(f"profiles interop: {len(RESULTS)} checks, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
