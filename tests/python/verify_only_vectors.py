#!/usr/bin/env python3
"""verify_only_vectors.py -- tokens of the verify-only algorithms, made by PyJWT.

    python3 tests/python/verify_only_vectors.py OUT.json

Writes one vector file that tests/verify_only_algorithms.rs reads (the
committed copy is tests/vectors/verify_only/pyjwt.json; scripts/
verify-only-interop.sh writes a fresh one and runs the test on it):

  jwks     a JWKS of fresh keys: EC P-384 (ES384), P-521 (ES512), P-256
           (ES256, for confusion), RSA keys with alg PS256, PS384, PS512,
           RS384, RS512, and the PS256 key's modulus published again under
           alg RS256 and with no alg (so "RS256");
  valid    one token per algorithm signed by PyJWT (plus RS256 under the
           shared modulus), each of which must verify;
  refused  near misses, each with the result code it must get.

Keys are made fresh on every run with `cryptography`; only PyJWT signs.
"""

import base64
import hashlib
import hmac
import json
import sys

import cryptography
import jwt
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

NOW = 1767225660  # 2026-01-01T00:01:00Z, the time the test verifies at
AUD = "wid-interop"
CLAIMS = {
    "aud": AUD,
    "exp": NOW + 3600,
    "iat": NOW - 60,
    "nbf": NOW - 60,
    "jti": "6c8f3a52-0c5d-4a4e-9f0e-1b2c3d4e5f60",
    "nomad_allocation_id": "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc",
    "nomad_job_id": "web",
    "nomad_namespace": "default",
    "nomad_task": "server",
    "sub": "global:default:web:frontend:server:default",
}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def int_bytes(v: int, size: int = 0) -> bytes:
    size = size or (v.bit_length() + 7) // 8
    return v.to_bytes(size, "big")


def ec_jwk(key, kid, alg, crv, size):
    nums = key.public_key().public_numbers()
    return {"kty": "EC", "crv": crv, "x": b64(int_bytes(nums.x, size)),
            "y": b64(int_bytes(nums.y, size)), "kid": kid, "alg": alg, "use": "sig"}


def rsa_jwk(key, kid, alg):
    nums = key.public_key().public_numbers()
    jwk = {"kty": "RSA", "n": b64(int_bytes(nums.n)), "e": b64(int_bytes(nums.e)),
           "kid": kid, "use": "sig"}
    if alg is not None:
        jwk["alg"] = alg
    return jwk


def sign(key, alg, kid, claims=CLAIMS):
    return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid, "typ": "JWT"})


def split(token):
    h, p, s = token.split(".")
    return h, p, unb64(s)


def with_sig(token, sig: bytes):
    h, p, _ = split(token)
    return f"{h}.{p}.{b64(sig)}"


def main(out):
    p384 = ec.generate_private_key(ec.SECP384R1())
    p521 = ec.generate_private_key(ec.SECP521R1())
    p256 = ec.generate_private_key(ec.SECP256R1())
    rsas = {alg: rsa.generate_private_key(public_exponent=65537, key_size=2048)
            for alg in ["PS256", "PS384", "PS512", "RS384", "RS512"]}
    keys = [
        ec_jwk(p384, "es384", "ES384", "P-384", 48),
        ec_jwk(p521, "es512", "ES512", "P-521", 66),
        ec_jwk(p256, "es256", "ES256", "P-256", 32),
    ]
    keys += [rsa_jwk(k, alg.lower(), alg) for alg, k in rsas.items()]
    # The PS256 key's modulus again: as an RS256 key, and without alg.
    keys.append(rsa_jwk(rsas["PS256"], "shared-rs256", "RS256"))
    keys.append(rsa_jwk(rsas["PS256"], "shared-noalg", None))

    valid = [
        {"name": "ES384", "kid": "es384", "token": sign(p384, "ES384", "es384")},
        {"name": "ES512", "kid": "es512", "token": sign(p521, "ES512", "es512")},
    ]
    for alg, k in rsas.items():
        valid.append({"name": alg, "kid": alg.lower(), "token": sign(k, alg, alg.lower())})
    for kid in ["shared-rs256", "shared-noalg"]:
        valid.append({"name": f"RS256 under {kid}", "kid": kid,
                      "token": sign(rsas["PS256"], "RS256", kid)})

    refused = []

    def refuse(name, token, code):
        refused.append({"name": name, "token": token, "code": code})

    unsupported, malformed, bad_sig = "UnsupportedAlgorithm", "MalformedToken", "BadSignature"
    # PS and RS on one RSA key, both ways.
    refuse("RS256 token under the PS256 key", sign(rsas["PS256"], "RS256", "ps256"), unsupported)
    refuse("PS256 token under the same modulus published as RS256",
           sign(rsas["PS256"], "PS256", "shared-rs256"), unsupported)
    refuse("PS256 token under the same modulus published without alg",
           sign(rsas["PS256"], "PS256", "shared-noalg"), unsupported)
    refuse("RS384 token under the PS384 key", sign(rsas["PS384"], "RS384", "ps384"), unsupported)
    refuse("PS512 token under the RS512 key", sign(rsas["RS512"], "PS512", "rs512"), unsupported)
    # The header alg must be the JWK's alg (same family, other hash).
    refuse("PS256 token under the PS384 key", sign(rsas["PS384"], "PS256", "ps384"), unsupported)
    refuse("RS512 token under the RS384 key", sign(rsas["RS384"], "RS512", "rs384"), unsupported)
    # Curves.
    refuse("ES384 token under the P-256 key", sign(p384, "ES384", "es256"), unsupported)
    refuse("ES256 token under the P-384 key", sign(p256, "ES256", "es384"), unsupported)
    refuse("ES512 token under the P-384 key", sign(p521, "ES512", "es384"), unsupported)
    refuse("ES384 token under the P-521 key", sign(p384, "ES384", "es512"), unsupported)
    # Signature lengths and DER.
    for alg, key, kid in [("ES384", p384, "es384"), ("ES512", p521, "es512")]:
        good = sign(key, alg, kid)
        h, p, sig = split(good)
        refuse(f"{alg} signature one byte short", with_sig(good, sig[:-1]), malformed)
        refuse(f"{alg} signature one byte long", with_sig(good, sig + b"\0"), malformed)
        hash_alg = hashes.SHA384() if alg == "ES384" else hashes.SHA512()
        der = key.sign(f"{h}.{p}".encode(), ec.ECDSA(hash_alg))
        refuse(f"{alg} signature DER-encoded (not r || s)", with_sig(good, der), malformed)
        flipped = bytearray(sig)
        flipped[-1] ^= 1
        refuse(f"{alg} signature with a bit flipped", with_sig(good, bytes(flipped)), bad_sig)
    for alg, k in rsas.items():
        good = sign(k, alg, alg.lower())
        _, _, sig = split(good)
        refuse(f"{alg} signature one byte short", with_sig(good, sig[:-1]), malformed)
        h, p, sig = split(good)
        other = json.loads(unb64(p))
        other["nomad_task"] = "db"
        tampered = f"{h}.{b64(json.dumps(other, separators=(',', ':')).encode())}.{b64(sig)}"
        refuse(f"{alg} token with its claims changed", tampered, bad_sig)
    # HS384 keyed with the public key (the classic confusion), and none.
    for kid, secret in [("ps256", unb64(keys[3]["n"])), ("es384", unb64(keys[0]["x"]))]:
        header = b64(json.dumps({"alg": "HS384", "kid": kid, "typ": "JWT"}).encode())
        payload = b64(json.dumps(CLAIMS).encode())
        mac = hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha384).digest()
        refuse(f"HS384 keyed with {kid}'s public key", f"{header}.{payload}.{b64(mac)}", unsupported)
    none_token = jwt.encode(CLAIMS, None, algorithm="none", headers={"kid": "ps256", "typ": "JWT"})
    refuse("alg none", none_token, unsupported)

    doc = {
        "generator": f"PyJWT {jwt.__version__} (cryptography {cryptography.__version__})",
        "now": NOW,
        "aud": AUD,
        "jwks": {"keys": keys},
        "valid": valid,
        "refused": refused,
    }
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"verify_only_vectors.py: {len(valid)} valid, {len(refused)} refused -> {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
