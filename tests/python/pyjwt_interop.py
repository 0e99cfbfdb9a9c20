#!/usr/bin/env python3
"""pyjwt_interop.py -- check the C ABI against an independent JWT stack (PyJWT).

    python3 tests/python/pyjwt_interop.py PATH/TO/libworkload_identity.so

(or set WID_LIB to the library's path). Needs PyPI `PyJWT` and `cryptography`.

  a. Tokens minted with wid_issue verify with PyJWT from the JWKS exported by
     wid_keyring_jwks (audience checked, tampering detected, rotation keeps
     the old key in the JWKS).
  b. Tokens signed by PyJWT with a key derived here (HKDF-SHA256 via
     `cryptography`) verify with wid_verify; wrong audience, HS256 and an
     unknown allocation are rejected with the documented result codes.

Prints `ok <name>` or `FAIL <name>: details` per check, then
`pyjwt interop: N checks, M failed`; exits 1 on any failure.
"""

import base64
import ctypes
import json
import os
import pathlib
import sys
import time
import traceback
import uuid
import warnings

try:
    import jwt
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
except ImportError as exc:  # pragma: no cover - environment dependent
    print(
        "pyjwt_interop.py: PyJWT and cryptography are required (%s)\n"
        '  install them with: python3 -m pip install "PyJWT[crypto]" cryptography' % exc,
        file=sys.stderr,
    )
    sys.exit(2)

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
REQUEST_MSGPACK = REPO_ROOT / "tests/vectors/msgpack/issue_request_task.msgpack"

# From include/workload_identity.h.
WID_KEY_STATE_ACTIVE = 1
WID_KEY_DERIVATION_HKDF_V1 = 1
WID_CONSISTENCY_STALE = 0
WID_CONSISTENCY_CONSISTENT = 1
WID_ALLOC_MISSING = 0
WID_ALLOC_LIVE = 1
WID_RESULT_OK = 0
WID_RESULT_MALFORMED_TOKEN = 10
WID_RESULT_BAD_SIGNATURE = 13
WID_RESULT_UNSUPPORTED_ALGORITHM = 11
WID_RESULT_AUDIENCE_MISMATCH = 16
WID_RESULT_ALLOCATION_NOT_FOUND = 20
WID_RESULT_STORE_UNAVAILABLE = 22
WID_ABI_VERSION = 1

# Independent statement of the hkdf-v1 contract (see scripts/keyring-vectors.py).
HKDF_V1_SALT = b"workload-identity/ed25519/v1"

MATERIAL = bytes(range(32))
KEY_ID = "interop-key"
LIVE_ALLOC = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc"
MISSING_ALLOC = "00000000-0000-4000-8000-000000000000"
SUBJECT = "global:default:web:frontend:server:vault_default"


class WidBytes(ctypes.Structure):
    _fields_ = [("data", ctypes.POINTER(ctypes.c_uint8)), ("len", ctypes.c_size_t)]


LOOKUP_FN = ctypes.CFUNCTYPE(
    ctypes.c_uint32,  # wid_result
    ctypes.c_void_p,  # void *userdata
    ctypes.POINTER(ctypes.c_uint8),  # const uint8_t *alloc_id
    ctypes.c_size_t,  # size_t alloc_id_len
    ctypes.c_uint32,  # uint32_t consistency
    ctypes.POINTER(ctypes.c_uint32),  # uint32_t *out_state
)


def load_library(path):
    lib = ctypes.CDLL(path)
    u32, i64, size, vp = ctypes.c_uint32, ctypes.c_int64, ctypes.c_size_t, ctypes.c_void_p
    cp = ctypes.c_char_p
    pbytes = ctypes.POINTER(WidBytes)
    sigs = {
        "wid_abi_version": ([], u32),
        "wid_result_name": ([u32], cp),
        "wid_last_error_message": ([cp, size], size),
        "wid_bytes_free": ([pbytes], None),
        "wid_keyring_new": ([ctypes.POINTER(vp)], u32),
        "wid_keyring_free": ([vp], None),
        "wid_keyring_insert": ([vp, cp, size, cp, size, u32, u32, i64], u32),
        "wid_keyring_rotate": ([vp, i64, pbytes], u32),
        "wid_keyring_jwks": ([vp, pbytes], u32),
        "wid_issue": ([vp, cp, size, i64, pbytes], u32),
        "wid_verifier_new": ([vp, cp, size, i64, LOOKUP_FN, vp, ctypes.POINTER(vp)], u32),
        "wid_verifier_free": ([vp], None),
        "wid_verify": ([vp, cp, size, i64, pbytes], u32),
    }
    for name, (argtypes, restype) in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = restype
    return lib


class Wid:
    """Thin helpers over the C ABI."""

    def __init__(self, lib):
        self.lib = lib

    def name(self, rc):
        return self.lib.wid_result_name(rc).decode()

    def last_error(self):
        n = self.lib.wid_last_error_message(None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        self.lib.wid_last_error_message(buf, n + 1)
        return buf.value.decode("utf-8", "replace")

    def describe(self, rc):
        """`NAME (code): last error message` -- call right after the failing call."""
        return "%s (%d): %s" % (self.name(rc), rc, self.last_error() or "<no message>")

    def take(self, b):
        """Copies library-owned bytes out and frees them."""
        try:
            return ctypes.string_at(b.data, b.len) if b.data else b""
        finally:
            self.lib.wid_bytes_free(ctypes.byref(b))

    def call_bytes(self, fn, *args):
        """Calls fn(*args, &out) -> (rc, detail, bytes or None)."""
        out = WidBytes()
        rc = fn(*args, ctypes.byref(out))
        if rc != WID_RESULT_OK:
            return rc, self.describe(rc), None
        return rc, "", self.take(out)


class CheckError(Exception):
    pass


def expect(cond, msg):
    if not cond:
        raise CheckError(msg)


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def b64url_encode(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def tamper_payload(token):
    """Same header and signature, different claims."""
    h, p, s = token.split(".")
    claims = json.loads(b64url_decode(p))
    claims["nomad_job_id"] = claims.get("nomad_job_id", "") + "-evil"
    p2 = b64url_encode(json.dumps(claims, separators=(",", ":")).encode())
    return ".".join((h, p2, s))


def tamper_signature(token):
    """Flips one bit in the middle of the (decoded) signature."""
    h, p, s = token.split(".")
    sig = bytearray(b64url_decode(s))
    sig[10] ^= 0x01
    return ".".join((h, p, b64url_encode(bytes(sig))))


def pyjwk_for(jwks_json, token):
    """The PyJWK in jwks_json named by the token's kid."""
    kid = jwt.get_unverified_header(token).get("kid")
    expect(kid is not None, "token header has no kid")
    keyset = jwt.PyJWKSet.from_json(jwks_json)
    for k in keyset.keys:
        if k.key_id == kid:
            return k
    raise CheckError(
        "kid %r not in the JWKS (kids: %s)" % (kid, [k.key_id for k in keyset.keys])
    )


def derive_private_key(material, key_id):
    seed = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=HKDF_V1_SALT, info=key_id.encode()
    ).derive(material)
    return Ed25519PrivateKey.from_private_bytes(seed)


class Runner:
    def __init__(self):
        self.total = 0
        self.failed = 0

    def run(self, name, fn):
        self.total += 1
        try:
            fn()
        except CheckError as e:
            self.failed += 1
            print("FAIL %s: %s" % (name, e))
        except Exception as e:  # an unexpected exception is a failure too
            self.failed += 1
            tb = traceback.format_exc().strip().splitlines()
            print("FAIL %s: unexpected %s: %s" % (name, type(e).__name__, e))
            for line in tb[-6:]:
                print("    " + line)
        else:
            print("ok %s" % name)
        sys.stdout.flush()


def main(argv):
    lib_path = argv[1] if len(argv) > 1 else os.environ.get("WID_LIB")
    if not lib_path:
        print("usage: pyjwt_interop.py PATH/TO/libworkload_identity.so (or WID_LIB=...)",
              file=sys.stderr)
        return 2
    lib = load_library(lib_path)
    wid = Wid(lib)
    r = Runner()
    now = int(time.time())
    print("pyjwt interop: PyJWT %s, cryptography %s, library %s"
          % (jwt.__version__, __import__("cryptography").__version__, lib_path))

    # Allocation lookup callback: LIVE for LIVE_ALLOC, MISSING otherwise.
    lookups = []

    def lookup(userdata, alloc_id, alloc_id_len, consistency, out_state):
        try:
            aid = ctypes.string_at(alloc_id, alloc_id_len).decode("utf-8", "replace")
            lookups.append((aid, consistency))
            out_state[0] = WID_ALLOC_LIVE if aid == LIVE_ALLOC else WID_ALLOC_MISSING
            return WID_RESULT_OK
        except Exception:  # never let an exception turn into "OK"
            traceback.print_exc()
            return WID_RESULT_STORE_UNAVAILABLE

    lookup_cb = LOOKUP_FN(lookup)  # kept alive until the verifier is freed

    state = {}  # shared between checks
    kr = ctypes.c_void_p()
    verifier = ctypes.c_void_p()

    def c_setup():
        expect(lib.wid_abi_version() == WID_ABI_VERSION,
               "wid_abi_version() = %d, want %d" % (lib.wid_abi_version(), WID_ABI_VERSION))
        rc = lib.wid_keyring_new(ctypes.byref(kr))
        expect(rc == WID_RESULT_OK and kr.value, "wid_keyring_new: " + wid.describe(rc))
        kid = KEY_ID.encode()
        rc = lib.wid_keyring_insert(kr, kid, len(kid), MATERIAL, len(MATERIAL),
                                    WID_KEY_DERIVATION_HKDF_V1, WID_KEY_STATE_ACTIVE, 0)
        expect(rc == WID_RESULT_OK, "wid_keyring_insert: " + wid.describe(rc))
        aud = b"vault.io"
        rc = lib.wid_verifier_new(kr, aud, len(aud), 60, lookup_cb, None, ctypes.byref(verifier))
        expect(rc == WID_RESULT_OK and verifier.value, "wid_verifier_new: " + wid.describe(rc))

    r.run("c-abi setup (keyring, insert interop-key, verifier)", c_setup)
    if r.failed:
        print("pyjwt interop: %d checks, %d failed" % (r.total, r.failed))
        return 1

    def issue():
        req = REQUEST_MSGPACK.read_bytes()
        rc, detail, tok = wid.call_bytes(lib.wid_issue, kr, req, len(req), now)
        expect(rc == WID_RESULT_OK, "wid_issue: " + detail)
        return tok.decode()

    def jwks():
        rc, detail, doc = wid.call_bytes(lib.wid_keyring_jwks, kr)
        expect(rc == WID_RESULT_OK, "wid_keyring_jwks: " + detail)
        return doc.decode()

    # ---- a. C ABI -> PyJWT ------------------------------------------------

    def a_issue_verifies():
        token = issue()
        state["token1"] = token
        header = jwt.get_unverified_header(token)
        expect(header == {"alg": "EdDSA", "kid": KEY_ID, "typ": "JWT"},
               "unexpected header %r" % header)
        doc = jwks()
        state["jwks1"] = doc
        key = pyjwk_for(doc, token)
        claims = jwt.decode(token, key, algorithms=["EdDSA"], audience="vault.io")
        want = {
            "nomad_allocation_id": LIVE_ALLOC,
            "sub": SUBJECT,
            "nomad_job_id": "web",
            "nomad_namespace": "default",
            "nomad_task": "server",
            "aud": ["vault.io", "consul.io"],
        }
        bad = {k: (claims.get(k), v) for k, v in want.items() if claims.get(k) != v}
        expect(not bad, "claims differ (got, want): %r" % bad)
        expect(claims.get("iat") == now and claims.get("nbf") == now,
               "iat/nbf %r/%r, want %d" % (claims.get("iat"), claims.get("nbf"), now))
        expect(claims.get("exp") == now + 3600,
               "exp %r, want now+3600 = %d" % (claims.get("exp"), now + 3600))
        expect(isinstance(claims.get("jti"), str) and uuid.UUID(claims["jti"]).version == 4,
               "jti %r is not a UUID v4" % claims.get("jti"))

    r.run("a1 wid_issue token verifies with PyJWT from wid_keyring_jwks", a_issue_verifies)

    def a_audience_checked():
        token = state["token1"]
        key = pyjwk_for(state["jwks1"], token)
        try:
            jwt.decode(token, key, algorithms=["EdDSA"], audience="other.io")
        except jwt.InvalidAudienceError:
            pass
        else:
            raise CheckError("decode with audience=other.io did not raise InvalidAudienceError")
        # consul.io is the token's second audience: accepted.
        jwt.decode(token, key, algorithms=["EdDSA"], audience="consul.io")

    r.run("a2 PyJWT rejects the token for audience other.io", a_audience_checked)

    def a_tamper():
        token = state["token1"]
        key = pyjwk_for(state["jwks1"], token)
        for what, bad in (("payload", tamper_payload(token)),
                          ("signature", tamper_signature(token))):
            try:
                jwt.decode(bad, key, algorithms=["EdDSA"], audience="vault.io")
            except jwt.InvalidSignatureError:
                pass
            else:
                raise CheckError("%s-tampered token did not raise InvalidSignatureError" % what)

    r.run("a3 PyJWT rejects tampered tokens (payload, signature)", a_tamper)

    def a_rotate():
        rc, detail, new_kid = wid.call_bytes(lib.wid_keyring_rotate, kr, now)
        expect(rc == WID_RESULT_OK, "wid_keyring_rotate: " + detail)
        new_kid = new_kid.decode()
        expect(new_kid and new_kid != KEY_ID, "rotate returned key ID %r" % new_kid)
        token2 = issue()
        hdr = jwt.get_unverified_header(token2)
        expect(hdr.get("kid") == new_kid,
               "post-rotation token kid %r, want the new key %r" % (hdr.get("kid"), new_kid))
        doc = jwks()
        kids = [k["kid"] for k in json.loads(doc)["keys"]]
        expect(KEY_ID in kids and new_kid in kids,
               "JWKS after rotation has kids %r, want both %r and %r" % (kids, KEY_ID, new_kid))
        for label, token in (("new", token2), ("old", state["token1"])):
            key = pyjwk_for(doc, token)
            claims = jwt.decode(token, key, algorithms=["EdDSA"], audience="vault.io")
            expect(claims.get("nomad_allocation_id") == LIVE_ALLOC,
                   "%s token: nomad_allocation_id %r" % (label, claims.get("nomad_allocation_id")))
        state["rotated_kid"] = new_kid

    r.run("a4 after wid_keyring_rotate, new and old tokens verify with the fresh JWKS", a_rotate)

    # ---- b. PyJWT -> C ABI ------------------------------------------------

    priv = derive_private_key(MATERIAL, KEY_ID)

    def b_derived_key_in_jwks():
        pub = priv.public_key().public_bytes(serialization.Encoding.Raw,
                                             serialization.PublicFormat.Raw)
        doc = json.loads(jwks())
        entry = [k for k in doc["keys"] if k.get("kid") == KEY_ID]
        expect(len(entry) == 1, "JWKS has %d entries for %s" % (len(entry), KEY_ID))
        expect(entry[0].get("x") == b64url_encode(pub),
               "JWKS x %r != independently derived %r" % (entry[0].get("x"), b64url_encode(pub)))

    r.run("b0 HKDF-derived public key (cryptography) matches the JWKS entry", b_derived_key_in_jwks)

    def claims_for(aud="vault.io", alloc=LIVE_ALLOC):
        return {
            "nomad_namespace": "default",
            "nomad_job_id": "web",
            "nomad_allocation_id": alloc,
            "nomad_task": "server",
            "sub": SUBJECT,
            "aud": aud,
            "iat": now,
            "nbf": now,
            "exp": now + 600,
            "jti": str(uuid.uuid4()),
        }

    def pyjwt_token(claims):
        return jwt.encode(claims, priv, algorithm="EdDSA", headers={"kid": KEY_ID})

    def verify(token):
        t = token.encode()
        return wid.call_bytes(lib.wid_verify, verifier, t, len(t), now)

    def expect_rejected(token, want):
        rc, detail, _ = verify(token)
        expect(rc == want, "wid_verify gave %s, want %s" % (
            detail or "%s (%d)" % (wid.name(rc), rc), wid.name(want)))
        print("    rejected as expected: %s" % detail)

    def b_pyjwt_verifies():
        claims = claims_for()
        token = pyjwt_token(claims)
        header = jwt.get_unverified_header(token)
        print("    PyJWT header: %s" % b64url_decode(token.split(".")[0]).decode())
        extra = set(header) - {"alg", "kid", "typ"}
        expect(not extra, "PyJWT added header fields the library rejects: %r" % sorted(extra))
        del lookups[:]
        rc, detail, out = verify(token)
        expect(rc == WID_RESULT_OK, "wid_verify: " + detail)
        got = json.loads(out)
        expect(got.get("jti") == claims["jti"],
               "claims jti %r, want %r" % (got.get("jti"), claims["jti"]))
        bad = {k: (got.get(k), claims[k]) for k in
               ("nomad_allocation_id", "sub", "nomad_job_id", "exp")
               if got.get(k) != claims[k]}
        expect(not bad, "claims differ (got, want): %r" % bad)
        expect(lookups == [(LIVE_ALLOC, WID_CONSISTENCY_STALE)],
               "lookup callback calls %r, want one STALE lookup of %s" % (lookups, LIVE_ALLOC))

    r.run("b1 PyJWT EdDSA token (HKDF-derived key) verifies with wid_verify", b_pyjwt_verifies)

    def b_audience():
        expect_rejected(pyjwt_token(claims_for(aud="other.io")), WID_RESULT_AUDIENCE_MISMATCH)

    r.run("b2 aud other.io -> WID_RESULT_AUDIENCE_MISMATCH", b_audience)

    def hmac_token(alg, secret):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            token = jwt.encode(claims_for(), secret, algorithm=alg, headers={"kid": KEY_ID})
        for w in caught:
            print("    note: PyJWT warned on %s encode: %s: %s"
                  % (alg, w.category.__name__, w.message))
        return token

    def b_hs256():
        token = hmac_token("HS256", "x")
        rc, detail, _ = verify(token)
        if rc == WID_RESULT_MALFORMED_TOKEN:
            raise CheckError(
                "wid_verify gave %s, want WID_RESULT_UNSUPPORTED_ALGORITHM: the library "
                "checks the signature length (64 bytes for Ed25519; HS256 has 32) before "
                "the header's alg, so a real non-EdDSA token is reported as malformed "
                "unless its signature happens to be 64 bytes (see b3b)" % detail)
        expect_rejected(token, WID_RESULT_UNSUPPORTED_ALGORITHM)

    r.run("b3 HS256 token -> WID_RESULT_UNSUPPORTED_ALGORITHM", b_hs256)

    def b_hs512():
        # HS512's signature is 64 bytes, like Ed25519's: it reaches the alg check.
        expect_rejected(hmac_token("HS512", "x" * 64), WID_RESULT_UNSUPPORTED_ALGORITHM)

    r.run("b3b HS512 token (64-byte signature) -> WID_RESULT_UNSUPPORTED_ALGORITHM", b_hs512)

    def b_missing_alloc():
        del lookups[:]
        expect_rejected(pyjwt_token(claims_for(alloc=MISSING_ALLOC)),
                        WID_RESULT_ALLOCATION_NOT_FOUND)
        want = [(MISSING_ALLOC, WID_CONSISTENCY_STALE), (MISSING_ALLOC, WID_CONSISTENCY_CONSISTENT)]
        expect(lookups == want, "lookup callback calls %r, want %r" % (lookups, want))

    r.run("b4 allocation missing -> WID_RESULT_ALLOCATION_NOT_FOUND (STALE then CONSISTENT)",
          b_missing_alloc)

    def b_tampered():
        token = pyjwt_token(claims_for())
        expect_rejected(tamper_payload(token), WID_RESULT_BAD_SIGNATURE)

    r.run("b5 payload-tampered PyJWT token -> WID_RESULT_BAD_SIGNATURE", b_tampered)

    lib.wid_verifier_free(verifier)
    lib.wid_keyring_free(kr)
    del lookup_cb

    print("pyjwt interop: %d checks, %d failed" % (r.total, r.failed))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
