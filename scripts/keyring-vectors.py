#!/usr/bin/env python3
"""keyring-vectors.py -- independent Ed25519 keyring test vectors.

    scripts/keyring-vectors.py generate
        Write tests/vectors/keyring.json.
    scripts/keyring-vectors.py check
        Recompute seed_hex and x of every vector in tests/vectors/keyring.json
        and exit 1 on any mismatch.

The values are computed with PyPI `cryptography` (HKDF-SHA256 and Ed25519),
independently of the Rust code.  `check` additionally cross-checks every
hkdf-v1 seed against a hand-written HKDF-SHA256 (RFC 5869, hmac/hashlib).

Contract:
  hkdf-v1:        seed = HKDF-SHA256(salt=b"workload-identity/ed25519/v1",
                                     ikm=material (32 bytes),
                                     info=key_id (ASCII), length=32)
  nomad-raw-seed: seed = material
  x = base64url (no padding) of the Ed25519 public key for that RFC 8032 seed.
"""

import base64
import hashlib
import hmac
import json
import os
import sys

try:
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
except ImportError as exc:  # pragma: no cover - environment dependent
    print(
        "keyring-vectors.py: the Python package 'cryptography' is required "
        "(%s)\n  install it with: python3 -m pip install cryptography" % exc,
        file=sys.stderr,
    )
    sys.exit(2)

SALT = "workload-identity/ed25519/v1"
DERIVATIONS = ("hkdf-v1", "nomad-raw-seed")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VECTOR_FILE = os.path.join(REPO_ROOT, "tests", "vectors", "keyring.json")
VECTOR_FILE_REL = "tests/vectors/keyring.json"

DESCRIPTION = (
    "Ed25519 keyring derivation test vectors produced by "
    "scripts/keyring-vectors.py with PyPI cryptography (HKDF-SHA256, Ed25519), "
    "independent of the Rust code."
)

# Materials (32 bytes each).
MATERIALS = {
    "zero": bytes(32),
    "ff": b"\xff" * 32,
    "seq": bytes(range(32)),
    "sha256": hashlib.sha256(b"workload-identity test material 1").digest(),
}

# Key IDs.
KID_UUID = "5b6f0c6e-8d7a-4e2b-9f1c-3a2d4e5f6a7b"
KID_ONE = "a"
KID_ROTATION = "key:rotation.2026-11_a"
KID_LONG = "k" * 128

# (name, material key, key_id, derivation)
VECTOR_SPECS = [
    # hkdf-v1: every material and every key ID at least once; each material
    # appears with two different key IDs, so the ID is shown to matter.
    ("hkdf-zero-uuid", "zero", KID_UUID, "hkdf-v1"),
    ("hkdf-zero-one-char", "zero", KID_ONE, "hkdf-v1"),
    ("hkdf-ff-rotation", "ff", KID_ROTATION, "hkdf-v1"),
    ("hkdf-ff-long-128", "ff", KID_LONG, "hkdf-v1"),
    ("hkdf-seq-uuid", "seq", KID_UUID, "hkdf-v1"),
    ("hkdf-seq-one-char", "seq", KID_ONE, "hkdf-v1"),
    ("hkdf-sha256-rotation", "sha256", KID_ROTATION, "hkdf-v1"),
    ("hkdf-sha256-long-128", "sha256", KID_LONG, "hkdf-v1"),
    # nomad-raw-seed: seed is the material; the key ID does not matter.
    ("nomad-zero", "zero", "nomad-key-1", "nomad-raw-seed"),
    ("nomad-ff", "ff", "nomad-key-2", "nomad-raw-seed"),
    ("nomad-seq", "seq", "nomad-key-3", "nomad-raw-seed"),
    ("nomad-sha256", "sha256", "nomad-key-4", "nomad-raw-seed"),
]


def hkdf_cryptography(material, key_id):
    return HKDF(
        algorithm=hashes.SHA256(),
        length=32,
        salt=SALT.encode("ascii"),
        info=key_id.encode("ascii"),
    ).derive(material)


def hkdf_by_hand(material, key_id):
    """RFC 5869 HKDF-SHA256 with L = 32 (a single expand block)."""
    prk = hmac.new(SALT.encode("ascii"), material, hashlib.sha256).digest()
    t1 = hmac.new(prk, key_id.encode("ascii") + b"\x01", hashlib.sha256).digest()
    return t1[:32]


def derive_seed(material, key_id, derivation):
    if derivation == "hkdf-v1":
        return hkdf_cryptography(material, key_id)
    if derivation == "nomad-raw-seed":
        return bytes(material)
    raise ValueError("unknown derivation %r" % (derivation,))


def public_x(seed):
    pub = Ed25519PrivateKey.from_private_bytes(seed).public_key()
    raw = pub.public_bytes(
        encoding=serialization.Encoding.Raw,
        format=serialization.PublicFormat.Raw,
    )
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def build_document():
    vectors = []
    for name, material_key, key_id, derivation in VECTOR_SPECS:
        material = MATERIALS[material_key]
        assert len(material) == 32
        seed = derive_seed(material, key_id, derivation)
        vectors.append(
            {
                "name": name,
                "material_hex": material.hex(),
                "key_id": key_id,
                "derivation": derivation,
                "seed_hex": seed.hex(),
                "x": public_x(seed),
            }
        )
    return {"description": DESCRIPTION, "salt": SALT, "vectors": vectors}


def cmd_generate():
    doc = build_document()
    os.makedirs(os.path.dirname(VECTOR_FILE), exist_ok=True)
    with open(VECTOR_FILE, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(doc, indent=2) + "\n")
    print("keyring vectors: wrote %d vectors to %s" % (len(doc["vectors"]), VECTOR_FILE_REL))
    return 0


def is_lower_hex(s, nbytes):
    return (
        isinstance(s, str)
        and len(s) == 2 * nbytes
        and all(c in "0123456789abcdef" for c in s)
    )


def cmd_check():
    try:
        with open(VECTOR_FILE, "r", encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        print("FAIL: cannot read %s: %s" % (VECTOR_FILE_REL, exc), file=sys.stderr)
        return 1

    errors = []
    if doc.get("salt") != SALT:
        errors.append("file salt %r differs from the contract salt %r" % (doc.get("salt"), SALT))

    vectors = doc.get("vectors")
    if not isinstance(vectors, list) or not vectors:
        errors.append("no vectors in file")
        vectors = []

    checked = 0
    cross_checked = 0
    for i, v in enumerate(vectors):
        name = v.get("name") if isinstance(v, dict) else None
        label = "vector %d (%s)" % (i, name if name else "<unnamed>")
        if not isinstance(v, dict) or not name:
            errors.append("%s: missing name" % label)
            continue
        material_hex = v.get("material_hex")
        key_id = v.get("key_id")
        derivation = v.get("derivation")
        if not is_lower_hex(material_hex, 32):
            errors.append("%s: material_hex is not 64 lowercase hex digits" % label)
            continue
        if not isinstance(key_id, str) or not key_id.isascii():
            errors.append("%s: key_id is not an ASCII string" % label)
            continue
        if derivation not in DERIVATIONS:
            errors.append("%s: unknown derivation %r" % (label, derivation))
            continue

        material = bytes.fromhex(material_hex)
        seed = derive_seed(material, key_id, derivation)
        if derivation == "hkdf-v1":
            manual = hkdf_by_hand(material, key_id)
            if manual != seed:
                errors.append(
                    "%s: cryptography HKDF %s != hand-written HKDF %s"
                    % (label, seed.hex(), manual.hex())
                )
            cross_checked += 1
        x = public_x(seed)

        if v.get("seed_hex") != seed.hex():
            errors.append(
                "%s: seed_hex mismatch: file %s, computed %s" % (label, v.get("seed_hex"), seed.hex())
            )
        if v.get("x") != x:
            errors.append("%s: x mismatch: file %s, computed %s" % (label, v.get("x"), x))
        checked += 1

    if errors:
        for e in errors:
            print("FAIL: %s" % e, file=sys.stderr)
        print(
            "keyring vectors: %d error(s) in %s; regenerate with: scripts/keyring-vectors.py generate"
            % (len(errors), VECTOR_FILE_REL),
            file=sys.stderr,
        )
        return 1

    print(
        "keyring vectors: hkdf-v1 seeds cross-checked against hand-written HKDF-SHA256 (hmac/hashlib): %d"
        % cross_checked
    )
    print("keyring vectors: %d checked, all match" % checked)
    return 0


def main(argv):
    if len(argv) != 2 or argv[1] not in ("generate", "check"):
        print("usage: %s generate | check" % argv[0], file=sys.stderr)
        return 2
    if argv[1] == "generate":
        return cmd_generate()
    return cmd_check()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
