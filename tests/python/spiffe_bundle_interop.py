#!/usr/bin/env python3
"""spiffe_bundle_interop.py -- SPIFFE federation against py-spiffe.

    python3 tests/python/spiffe_bundle_interop.py endpoint PATH/TO/wid
    python3 tests/python/spiffe_bundle_interop.py write OUT_DIR

Needs PyPI `PyJWT`, `cryptography` and `spiffe` (py-spiffe 0.3.2). Run by
scripts/spiffe-bundle-interop.sh.

endpoint  py-spiffe reads our bundle endpoint: `wid serve` serves
          /spiffe/bundle.json; spiffe.JwtBundle.parse takes it as the trust
          domain's bundle, and JWT-SVIDs from `wid issue
          --spiffe-trust-domain` (ES256 and RS256) pass
          JwtSvid.parse_and_validate with it. After `wid keyring rotate` the
          bundle's spiffe_sequence is higher, and a token of the new key
          validates with the bundle fetched again (and not with the old one).
write     py-spiffe writes a bundle that our SpiffeBundleSource reads: keys
          made with `cryptography` (EC P-256, P-384, RSA 2048) are given to
          spiffe.JwtBundle; its jwt_authorities are dumped as a SPIFFE bundle
          (use jwt-svid, spiffe_sequence, spiffe_refresh_hint) and parsed
          back by JwtBundle.parse to an equal bundle; PyJWT signs one
          JWT-SVID per key, which py-spiffe validates with that bundle.
          OUT_DIR/bundle.json and OUT_DIR/tokens.json are what
          tests/remote_jwks.rs (spiffe_bundle_written_by_py_spiffe) reads
          when WID_PY_SPIFFE_BUNDLE=OUT_DIR (else its committed copy in
          tests/vectors/spiffe_bundle/).

Prints `ok <name>` or `FAIL <name>: details` per check; exits 1 on any failure.
"""

import json
import pathlib
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from spiffe import JwtBundle, JwtSvid, TrustDomain

TD = "peer.example.org"
AUD = "spiffe-validator"
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


def run(wid, *args):
    p = subprocess.run([wid, *args], capture_output=True, text=True, check=False)
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
    },
    "Task": "server",
    "Identity": {"Name": "default", "Audience": [AUD], "TTL": "10m"},
}


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 -- loopback
        return r.status, r.headers, r.read()


def endpoint(wid):
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="spiffe-bundle-interop."))
    ks = str(tmp / "keystore")
    now = int(time.time())
    run(wid, "keyring", "init", "--keystore", ks, "--alg", "EdDSA", "--alg", "ES256",
        "--alg", "RS256", "--now", str(now - 120))
    req = tmp / "request.json"
    req.write_text(json.dumps(REQUEST))
    serve = subprocess.Popen(
        [wid, "serve", "--keystore", ks, "--listen", "127.0.0.1:0",
         "--spiffe-refresh-hint", "90s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = serve.stdout.readline().strip()
        if not line.startswith("listening on http://"):
            raise RuntimeError(f"wid serve: {line!r} {serve.stderr.read()}")
        url = line.removeprefix("listening on ") + "/spiffe/bundle.json"

        def issue(alg):
            return run(wid, "issue", "--keystore", ks, "--request", str(req), "--alg", alg,
                       "--spiffe-trust-domain", TD).strip()

        status, headers, body = get(url)
        first = json.loads(body)

        @check("endpoint: the bundle is SPIFFE's: jwt-svid keys, sequence, refresh hint")
        def _():
            assert status == 200, status
            assert headers.get("ETag"), headers
            # Never cached longer than the refresh hint says.
            assert headers.get("Cache-Control") == "max-age=90", headers
            assert sorted(k["alg"] for k in first["keys"]) == ["ES256", "RS256"], first
            assert all(k["use"] == "jwt-svid" for k in first["keys"]), first
            assert first["spiffe_refresh_hint"] == 90, first
            assert first["spiffe_sequence"] == now - 120, first

        bundle = JwtBundle.parse(TrustDomain(TD), body)

        @check("endpoint: py-spiffe parses the bundle (JwtBundle.parse)")
        def _():
            assert set(bundle.jwt_authorities) == {k["kid"] for k in first["keys"]}

        for alg in ("ES256", "RS256"):
            @check(f"endpoint: py-spiffe validates our {alg} JWT-SVID with it")
            def _():
                svid = JwtSvid.parse_and_validate(issue(alg), bundle, {AUD})
                assert str(svid.spiffe_id).startswith(f"spiffe://{TD}/"), svid.spiffe_id

        run(wid, "keyring", "rotate", "--keystore", ks, "--alg", "ES256", "--now", str(now))
        _, _, body2 = get(url)
        second = json.loads(body2)

        @check("endpoint: a rotation raises spiffe_sequence; the new key validates")
        def _():
            assert second["spiffe_sequence"] == now, second
            assert second["spiffe_sequence"] > first["spiffe_sequence"]
            token = issue("ES256")
            JwtSvid.parse_and_validate(token, JwtBundle.parse(TrustDomain(TD), body2), {AUD})
            try:
                JwtSvid.parse_and_validate(token, bundle, {AUD})
            except Exception:  # noqa: BLE001 -- the old bundle lacks the key
                pass
            else:
                raise AssertionError("the bundle before the rotation validated a new key's token")
    finally:
        serve.terminate()
        serve.wait(timeout=10)


def write(out):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    now = int(time.time())
    keys = {
        "py-es256": (ec.generate_private_key(ec.SECP256R1()), "ES256"),
        "py-es384": (ec.generate_private_key(ec.SECP384R1()), "ES384"),
        "py-rs256": (rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256"),
    }
    td = TrustDomain(TD)
    built = JwtBundle(td, {kid: k.public_key() for kid, (k, _) in keys.items()})

    def jwk_of(kid, public):
        if isinstance(public, rsa.RSAPublicKey):
            jwk = RSAAlgorithm.to_jwk(public, as_dict=True)
        else:
            jwk = ECAlgorithm.to_jwk(public, as_dict=True)
        jwk.update({"kid": kid, "use": "jwt-svid"})
        return jwk

    doc = {
        "keys": [jwk_of(kid, pub) for kid, pub in sorted(built.jwt_authorities.items())],
        "spiffe_sequence": 7,
        "spiffe_refresh_hint": 120,
    }
    text = json.dumps(doc, indent=1)

    @check("write: py-spiffe parses the dumped bundle back to the bundle it built")
    def _():
        assert JwtBundle.parse(td, text.encode()) == built

    claims = {
        "aud": AUD,
        "iat": now - 60,
        "nbf": now - 60,
        "exp": now + 3600,
        "nomad_allocation_id": "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc",
        "nomad_job_id": "web",
        "nomad_namespace": "default",
        "nomad_task": "server",
        "sub": f"spiffe://{TD}/global/default/web/frontend/server/default",
    }
    tokens = {}
    for kid, (key, alg) in keys.items():
        token = jwt.encode(claims, key, algorithm=alg, headers={"kid": kid, "typ": "JWT"})
        tokens[alg] = token

        @check(f"write: py-spiffe validates the {alg} JWT-SVID with the bundle")
        def _():
            JwtSvid.parse_and_validate(token, built, {AUD})

    (out / "bundle.json").write_text(text + "\n")
    (out / "tokens.json").write_text(json.dumps(
        {"trust_domain": TD, "audience": AUD, "now": now, "sequence": 7,
         "refresh_hint": 120, "tokens": tokens}, indent=1) + "\n")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("endpoint", "write"):
        print(__doc__, file=sys.stderr)
        return 2
    (endpoint if sys.argv[1] == "endpoint" else write)(sys.argv[2])
    return 0 if RESULTS and all(RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
