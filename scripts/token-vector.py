#!/usr/bin/env python3
"""token-vector.py -- a fixed workload identity token, made independently.

    scripts/token-vector.py generate   write tests/vectors/token.json
    scripts/token-vector.py check      re-derive the key, re-sign, compare

The token is signed with PyPI `cryptography` (HKDF-SHA256 seed derivation,
Ed25519) from a known material and key ID; the Rust test
(tests/token_vector.rs) must produce the identical token from the same claims,
and verify it.  Ed25519 signatures are deterministic, so the bytes are fixed.
"""

import base64
import json
import os
import sys

try:
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
except ImportError as exc:  # pragma: no cover - environment dependent
    print("token-vector.py: needs PyPI cryptography (%s): python3 -m pip install cryptography" % exc,
          file=sys.stderr)
    sys.exit(2)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILE = os.path.join(ROOT, "tests", "vectors", "token.json")

MATERIAL = bytes(range(32))
KEY_ID = "5b6f0c6e-8d7a-4e2b-9f1c-3a2d4e5f6a7b"
# Compact JSON in the library's claim order (see src/claims.rs).
HEADER = '{"alg":"EdDSA","kid":"%s","typ":"JWT"}' % KEY_ID
CLAIMS = [
    ("nomad_namespace", "default"),
    ("nomad_job_id", "web"),
    ("nomad_allocation_id", "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc"),
    ("nomad_task", "server"),
    ("sub", "global:default:web:frontend:server:vault_default"),
    ("aud", ["vault.io", "consul.io"]),
    ("iat", 1700000000),
    ("nbf", 1700000000),
    ("exp", 1700003600),
    ("jti", "0b9c6c6e-2d7a-4e2b-9f1c-3a2d4e5f6a7b"),
    ("iss", "https://nomad.example.com"),
]


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def build():
    seed = HKDF(algorithm=hashes.SHA256(), length=32,
                salt=b"workload-identity/ed25519/v1",
                info=KEY_ID.encode()).derive(MATERIAL)
    key = Ed25519PrivateKey.from_private_bytes(seed)
    payload = json.dumps(dict(CLAIMS), separators=(",", ":"))
    signing_input = b64(HEADER.encode()) + "." + b64(payload.encode())
    token = signing_input + "." + b64(key.sign(signing_input.encode()))
    x = b64(key.public_key().public_bytes(serialization.Encoding.Raw,
                                          serialization.PublicFormat.Raw))
    return {
        "description": "A fixed token signed by scripts/token-vector.py with PyPI cryptography; "
                       "tests/token_vector.rs must reproduce it byte for byte and verify it.",
        "material_hex": MATERIAL.hex(),
        "key_id": KEY_ID,
        "derivation": "hkdf-v1",
        "x": x,
        "header": HEADER,
        "payload": payload,
        "now": 1700000000,
        "token": token,
    }


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("generate", "check"):
        print("usage: token-vector.py generate|check", file=sys.stderr)
        return 2
    fresh = build()
    if sys.argv[1] == "generate":
        with open(FILE, "w") as f:
            json.dump(fresh, f, indent=2)
            f.write("\n")
        print("token vector: wrote tests/vectors/token.json")
        return 0
    with open(FILE) as f:
        committed = json.load(f)
    if committed != fresh:
        for k in fresh:
            if committed.get(k) != fresh[k]:
                print("token vector: %s differs: committed %r, computed %r" % (k, committed.get(k), fresh[k]))
        return 1
    print("token vector: re-signed with cryptography, matches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
