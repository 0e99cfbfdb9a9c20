#!/usr/bin/env python3
"""pyjwt_interop.py -- check the C ABI against an independent JWT stack (PyJWT).

    python3 tests/python/pyjwt_interop.py PATH/TO/libworkload_identity.so [PATH/TO/pop_interop]

The library is the C ABI crate's (workload-identity-ffi): installed or staged
as libworkload_identity.so (scripts/pyjwt-interop.sh stages it under
<target dir>/c/lib), or cargo's target/release/libworkload_identity_ffi.so.
(Or set WID_LIB to the library's path, WID_POP_INTEROP to the proof program's;
the latter defaults to target/release/examples/pop_interop). Needs PyPI
`PyJWT` and `cryptography`.

  a. Tokens minted with wid_issue verify with PyJWT from the JWKS exported by
     wid_keyring_jwks (audience checked, tampering detected, rotation keeps
     the old key in the JWKS).
  b. Tokens signed by PyJWT with a key derived here (HKDF-SHA256 via
     `cryptography`) verify with wid_verify; wrong audience, HS256 and an
     unknown allocation are rejected with the documented result codes.
  c. ES256 and RS256 tokens minted with wid_issue_alg (keys made by
     wid_keyring_rotate_alg) verify with PyJWT from the exported JWKS (EC and
     RSA entries), audience checked, tampering detected.
  d. PyJWT-signed ES256 tokens verify with wid_verify, the P-256 key derived
     here from a known material and kid by the ES256 HKDF rule and inserted with
     wid_keyring_insert_alg(ES256, HKDF_V1); PyJWT-signed RS256 tokens verify
     with an RSA-2048 key made by `cryptography` and inserted as PKCS#8 DER.
  e. Algorithm confusion is refused with WID_RESULT_UNSUPPORTED_ALGORITHM
     (HS256 keyed with our RSA public key PEM, alg none, RS256 signature under
     an ES256 header and kid, and the reverse); RSA keys under 2048 bits or
     with e != 65537, and wrong material/derivation pairings, are refused by
     wid_keyring_insert_alg with WID_RESULT_INVALID_ARGUMENT.
  f. Proof of possession, through examples/pop_interop.rs (a co-process that
     speaks JSON lines and calls the Rust API, WorkloadKey, Issuer and
     Verifier::verify_proof, directly): for workload keys EdDSA
     and ES256 and WIT signers EdDSA, ES256 and RS256, our WIT's key is not
     in our JWKS (a WIT is no bearer token), and the WIT verifies with PyJWT
     from our WIT key set (typ wit+jwt, exp, no aud, iss, wimse:// sub, cnf.jwk
     with alg) and our WPT with PyJWT under PyJWK(cnf.jwk) (typ wpt+jwt, aud =
     the target without query, exp, 128-bit jti, wth = base64url(sha256(WIT))
     by hashlib). The reverse: PyJWT WPTs signed with a `cryptography` key
     verify with Verifier::verify_proof for a WIT we issued for that key, once
     (then PROOF_REPLAYED); wrong wth/aud/exp/jti/typ/header/key/alg, alg none,
     a flipped signature bit, the WIT as its own proof and a proof shown with
     another WIT are PROOF_INVALID.

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
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
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
WID_KEY_STATE_INACTIVE = 2
WID_KEY_DERIVATION_HKDF_V1 = 1
WID_KEY_DERIVATION_NOMAD_RAW_SEED = 2
WID_KEY_DERIVATION_PKCS8 = 3
WID_ALG_EDDSA = 1
WID_ALG_ES256 = 2
WID_ALG_RS256 = 3
WID_CONSISTENCY_STALE = 0
WID_CONSISTENCY_CONSISTENT = 1
WID_ALLOC_MISSING = 0
WID_ALLOC_LIVE = 1
WID_RESULT_OK = 0
WID_RESULT_INVALID_ARGUMENT = 2
WID_RESULT_MALFORMED_TOKEN = 10
WID_RESULT_BAD_SIGNATURE = 13
WID_RESULT_UNSUPPORTED_ALGORITHM = 11
WID_RESULT_AUDIENCE_MISMATCH = 16
WID_RESULT_ALLOCATION_NOT_FOUND = 20
WID_RESULT_STORE_UNAVAILABLE = 22
WID_RESULT_NO_ACTIVE_KEY = 30
WID_ABI_VERSION = 1

# Independent statement of the hkdf-v1 contract (see scripts/keyring-vectors.py).
HKDF_V1_SALT = b"workload-identity/ed25519/v1"
# And of the ES256 one (DESIGN.md "Signing algorithms"): okm = HKDF-SHA256(salt,
# material, info=key ID, L=48), d = (OS2IP(okm) mod (n - 1)) + 1.
HKDF_P256_SALT = b"workload-identity/p256/v1"
P256_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551

MATERIAL = bytes(range(32))
KEY_ID = "interop-key"
LIVE_ALLOC = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc"
MISSING_ALLOC = "00000000-0000-4000-8000-000000000000"
SUBJECT = "global:default:web:frontend:server:vault_default"
ISSUER = "https://nomad.example.com"
ES256_MATERIAL = bytes.fromhex("9f3a61c2d07e4b18a5c3e9f0217d6b4c8e05f1a3b7d9c2e4061f8a3b5c7d9e0f")
ES256_KEY_ID = "interop-es256"
RS256_KEY_ID = "interop-rs256"


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
        "wid_keyring_insert_alg": ([vp, u32, cp, size, cp, size, u32, u32, i64], u32),
        "wid_keyring_rotate": ([vp, i64, pbytes], u32),
        "wid_keyring_rotate_alg": ([vp, u32, i64, pbytes], u32),
        "wid_keyring_jwks": ([vp, pbytes], u32),
        "wid_issue": ([vp, cp, size, i64, pbytes], u32),
        "wid_issue_alg": ([vp, u32, cp, size, cp, size, i64, pbytes], u32),
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


def derive_p256_private_key(material, key_id):
    okm = HKDF(
        algorithm=hashes.SHA256(), length=48, salt=HKDF_P256_SALT, info=key_id.encode()
    ).derive(material)
    d = int.from_bytes(okm, "big") % (P256_N - 1) + 1
    return ec.derive_private_key(d, ec.SECP256R1())


def rsa_pkcs8_der(key):
    return key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def forge(header, claims, sign):
    """A compact JWS with exactly `header` (no fields added), signed by
    sign(signing_input) -> signature bytes."""
    h = b64url_encode(json.dumps(header, separators=(",", ":")).encode())
    p = b64url_encode(json.dumps(claims, separators=(",", ":")).encode())
    signing_input = ("%s.%s" % (h, p)).encode()
    return "%s.%s.%s" % (h, p, b64url_encode(sign(signing_input)))


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


# ---- f. Proof of possession (WIT + WPT), through examples/pop_interop.rs ----

POP_TRUST_DOMAIN = "nomad.example.com"
POP_ISSUER = "https://nomad.example.com"
POP_SUB = "wimse://nomad.example.com/global/default/web/frontend/server/vault_default"
POP_TARGET = "https://vault.example.com/v1/auth/jwt/login"
POP_KEY_ALGS = ("EdDSA", "ES256")
POP_SIGNERS = ("EdDSA", "ES256", "RS256")
# Most a WPT may be valid for by the verifier's default (max_proof_lifetime).
POP_MAX_PROOF_LIFETIME = 300


class PopProgram:
    """examples/pop_interop.rs as a co-process: one JSON request per line on
    its stdin, one JSON answer per line on its stdout."""

    def __init__(self, path):
        import subprocess
        self.proc = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)

    def call(self, **req):
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        expect(line, "pop_interop exited (status %r) answering %r" % (self.proc.poll(), req["op"]))
        reply = json.loads(line)
        expect("fault" not in reply, "pop_interop %s: %s" % (req["op"], reply.get("fault")))
        return reply

    def close(self):
        self.proc.stdin.close()
        status = self.proc.wait(timeout=30)
        expect(status == 0, "pop_interop exited with status %d" % status)


def token_hash(value):
    """base64url(SHA-256(ASCII of value)), unpadded: a WPT's wth (and ath, tth)."""
    import hashlib
    return b64url_encode(hashlib.sha256(value.encode("ascii")).digest())


def decode_segment(token, i):
    return json.loads(b64url_decode(token.split(".")[i]))


def expect_raises(what, exc_type, fn):
    try:
        fn()
    except exc_type:
        return
    except Exception as e:  # the wrong failure is a failure too
        raise CheckError("%s raised %s (%s), want %s" % (what, type(e).__name__, e,
                                                         exc_type.__name__))
    raise CheckError("%s did not raise %s" % (what, exc_type.__name__))


def check_wit_with_pyjwt(wit, jwks_json, signer, key_alg, now, wit_jwks_json):
    """Checks that PyJWT cannot verify a WIT from the JWKS relying parties
    trust (its key is not there: a WIT is no bearer token), verifies it from
    the WIT key set, and checks the WIT's shape; returns its claims."""
    expect_raises("finding the WIT's key in the JWKS (a WIT key is never there)",
                  CheckError, lambda: pyjwk_for(jwks_json, wit))
    jwks_json = wit_jwks_json
    header = jwt.get_unverified_header(wit)
    expect(header.get("typ") == "wit+jwt", "WIT typ %r, want wit+jwt" % header.get("typ"))
    expect(header.get("alg") == signer, "WIT alg %r, want %s" % (header.get("alg"), signer))
    expect(set(header) == {"alg", "kid", "typ"}, "WIT header %r" % header)
    key = pyjwk_for(jwks_json, wit)
    claims = jwt.decode(wit, key, algorithms=[signer], issuer=POP_ISSUER,
                        options={"require": ["exp", "iat", "sub", "iss"]})
    expect("aud" not in claims, "a WIT carries no aud: %r" % claims.get("aud"))
    expect(now < claims["exp"] <= now + 3600 + 5,
           "WIT exp %r not within (now, now + 1 h] (now %d)" % (claims["exp"], now))
    expect(claims["sub"].startswith("wimse://"), "WIT sub %r is not a wimse:// URI"
           % claims["sub"])
    expect(claims["sub"] == POP_SUB, "WIT sub %r, want %s" % (claims["sub"], POP_SUB))
    jwk = claims.get("cnf", {}).get("jwk")
    expect(isinstance(jwk, dict), "WIT has no cnf.jwk: %r" % claims.get("cnf"))
    expect(jwk.get("alg") == key_alg, "cnf.jwk.alg %r, want %s" % (jwk.get("alg"), key_alg))
    want_members = {"kty", "crv", "x", "alg"} | ({"y"} if key_alg == "ES256" else set())
    expect(set(jwk) == want_members, "cnf.jwk members %s, want %s (public only)"
           % (sorted(jwk), sorted(want_members)))
    want_kty = {"EdDSA": ("OKP", "Ed25519"), "ES256": ("EC", "P-256")}[key_alg]
    expect((jwk["kty"], jwk["crv"]) == want_kty, "cnf.jwk kty/crv %r/%r, want %r"
           % (jwk["kty"], jwk["crv"], want_kty))
    keyring_xs = {k.get("x") for k in json.loads(jwks_json)["keys"]}
    expect(jwk["x"] not in keyring_xs, "cnf.jwk is one of the issuer's keys")
    return claims


def check_wpt_with_pyjwt(wpt, wit, cnf_jwk, key_alg, target, now):
    """Verifies a WPT with PyJWT under the key built from the WIT's cnf.jwk;
    returns its claims."""
    header = jwt.get_unverified_header(wpt)
    expect(header == {"alg": key_alg, "typ": "wpt+jwt"},
           "WPT header %r, want exactly alg %s and typ wpt+jwt" % (header, key_alg))
    pop_key = jwt.PyJWK(cnf_jwk)
    expect(pop_key.algorithm_name == key_alg, "PyJWK algorithm %r" % pop_key.algorithm_name)
    claims = jwt.decode(wpt, pop_key, algorithms=[key_alg], audience=target,
                        options={"require": ["exp", "jti", "aud"]})
    expect(set(claims) == {"aud", "exp", "jti", "wth"},
           "WPT claims %s, want exactly aud, exp, jti, wth (no iss/sub/iat/nbf)"
           % sorted(claims))
    expect(claims["aud"] == target, "WPT aud %r, want %r" % (claims["aud"], target))
    expect(now <= claims["exp"] <= now + POP_MAX_PROOF_LIFETIME,
           "WPT exp %r not within [now, now + %ds] (now %d)"
           % (claims["exp"], POP_MAX_PROOF_LIFETIME, now))
    jti = claims["jti"]
    expect(isinstance(jti, str) and len(jti) == 22 and len(b64url_decode(jti)) == 16,
           "WPT jti %r is not 128 bits in base64url (22 characters)" % jti)
    want = token_hash(wit)
    expect(claims["wth"] == want, "WPT wth %r, want base64url(sha256(WIT)) = %r"
           % (claims["wth"], want))
    # The same WPT under another target, or tampered, fails in PyJWT.
    expect_raises("PyJWT decode with another audience", jwt.InvalidAudienceError,
                  lambda: jwt.decode(wpt, pop_key, algorithms=[key_alg],
                                     audience="https://consul.example.com/v1/acl/login"))
    expect_raises("PyJWT decode of a WPT with a flipped signature bit",
                  jwt.InvalidSignatureError,
                  lambda: jwt.decode(tamper_signature(wpt), pop_key, algorithms=[key_alg],
                                     audience=target))
    return claims


def python_jwk(priv, alg):
    """The public JWK (with alg) of a cryptography private key, by hand."""
    pub = priv.public_key()
    if alg == "EdDSA":
        raw = pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return {"kty": "OKP", "crv": "Ed25519", "x": b64url_encode(raw), "alg": "EdDSA"}
    nums = pub.public_numbers()
    return {"kty": "EC", "crv": "P-256", "x": b64url_encode(nums.x.to_bytes(32, "big")),
            "y": b64url_encode(nums.y.to_bytes(32, "big")), "alg": "ES256"}


def python_key(alg):
    return Ed25519PrivateKey.generate() if alg == "EdDSA" else ec.generate_private_key(
        ec.SECP256R1())


def python_wpt(priv, alg, wit, target=POP_TARGET, now=None, headers=None, **over):
    """A WPT made by PyJWT with a cryptography key."""
    now = int(time.time()) if now is None else now
    claims = {"aud": target, "exp": now + 60, "jti": b64url_encode(os.urandom(16)),
              "wth": token_hash(wit)}
    claims.update(over)
    claims = {k: v for k, v in claims.items() if v is not None}
    return jwt.encode(claims, priv, algorithm=alg,
                      headers=headers if headers is not None else {"typ": "wpt+jwt"})


def pop_checks(r, state, program_path):
    """Section f: WITs and WPTs across implementations."""
    prog = {}

    def f_start():
        expect(program_path and os.path.isfile(program_path),
               "the proof interop program %r is missing; build it with "
               "`cargo build --release --locked --example pop_interop` (scripts/pyjwt-interop.sh "
               "does)" % program_path)
        prog["p"] = PopProgram(program_path)

    r.run("f0 start examples/pop_interop (%s)" % program_path, f_start)
    if "p" not in prog:
        return
    p = prog["p"]

    def f_ours_verify_in_pyjwt(key_alg, signer):
        # The target carries a query and fragment: the WPT's aud must drop them.
        out = p.call(op="emit", key=key_alg, signer=signer, target=POP_TARGET + "?role=web#x")
        now = int(time.time())
        wit, wpt = out["wit"], out["wpt"]
        wit_claims = check_wit_with_pyjwt(wit, out["jwks"], signer, key_alg, now,
                                          out["wit_jwks"])
        cnf_jwk = wit_claims["cnf"]["jwk"]
        check_wpt_with_pyjwt(wpt, wit, cnf_jwk, key_alg, POP_TARGET, now)
        # The WIT's issuer key is not the proof key: PyJWT refuses the WPT under it.
        issuer_key = pyjwk_for(out["wit_jwks"], wit)
        if issuer_key.algorithm_name == key_alg:
            expect_raises("PyJWT decode of the WPT under the WIT's signing key",
                          jwt.InvalidSignatureError,
                          lambda: jwt.decode(wpt, issuer_key, algorithms=[key_alg],
                                             audience=POP_TARGET))
        # And the pair is genuine for our verifier too: once.
        got = p.call(op="verify_proof", wit=wit, wpt=wpt, target=POP_TARGET)
        expect(got.get("ok") is True, "our verify_proof refused it: %r" % got)
        again = p.call(op="verify_proof", wit=wit, wpt=wpt, target=POP_TARGET)
        expect(again.get("code") == "WID_RESULT_PROOF_REPLAYED",
               "replayed: %r, want WID_RESULT_PROOF_REPLAYED" % again)
        state["tokens_checked"] = state.get("tokens_checked", 0) + 2

    for key_alg in POP_KEY_ALGS:
        for signer in POP_SIGNERS:
            r.run("f1 %s-signed WIT: its key is not in the JWKS; it verifies with PyJWT from the "
                  "WIT key set (typ wit+jwt, exp, no aud, wimse:// sub, cnf.jwk with alg); its %s WPT verifies with PyJWT under "
                  "PyJWK(cnf.jwk) (typ wpt+jwt, aud, exp, 128-bit jti, wth = sha256(WIT))"
                  % (signer, key_alg),
                  lambda k=key_alg, s=signer: f_ours_verify_in_pyjwt(k, s))

    def f_pyjwt_wpt_verifies(key_alg, signer):
        priv = python_key(key_alg)
        jwk = python_jwk(priv, key_alg)
        if key_alg == "ES256":
            # PyJWT's own JWK export agrees with ours.
            exported = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(priv.public_key()))
            expect((exported["x"], exported["y"]) == (jwk["x"], jwk["y"]),
                   "PyJWT to_jwk %r vs %r" % (exported, jwk))
        wit = p.call(op="issue", jwk=jwk, signer=signer)["wit"]
        sets = p.call(op="jwks")
        now = int(time.time())
        claims = check_wit_with_pyjwt(wit, sets["jwks"], signer, key_alg, now, sets["wit_jwks"])
        expect(claims["cnf"]["jwk"] == jwk, "cnf.jwk %r, want the Python key %r"
               % (claims["cnf"]["jwk"], jwk))
        wpt = python_wpt(priv, key_alg, wit)
        expect(jwt.get_unverified_header(wpt) == {"alg": key_alg, "typ": "wpt+jwt"},
               "PyJWT WPT header %r" % jwt.get_unverified_header(wpt))
        got = p.call(op="verify_proof", wit=wit, wpt=wpt, target=POP_TARGET + "?q=1")
        expect(got.get("ok") is True, "our verify_proof refused PyJWT's WPT: %r" % got)
        expect(got["jti"] == jwt.decode(wpt, options={"verify_signature": False})["jti"]
               and got["sub"] == POP_SUB, "verified %r" % got)
        again = p.call(op="verify_proof", wit=wit, wpt=wpt, target=POP_TARGET)
        expect(again.get("code") == "WID_RESULT_PROOF_REPLAYED",
               "replayed: %r, want WID_RESULT_PROOF_REPLAYED" % again)
        state["tokens_checked"] = state.get("tokens_checked", 0) + 1
        state.setdefault("py_wits", {})[key_alg] = (priv, wit)

    for key_alg in POP_KEY_ALGS:
        for signer in POP_SIGNERS:
            r.run("f2 PyJWT %s WPT (cryptography key) for our %s-signed WIT whose cnf.jwk is "
                  "that key verifies with verify_proof, once" % (key_alg, signer),
                  lambda k=key_alg, s=signer: f_pyjwt_wpt_verifies(k, s))

    def f_pyjwt_wpt_refused(key_alg):
        priv, wit = state["py_wits"][key_alg]
        other_alg = "ES256" if key_alg == "EdDSA" else "EdDSA"
        other_wit = p.call(op="issue", jwk=python_jwk(python_key(key_alg), key_alg),
                           signer="EdDSA")["wit"]
        now = int(time.time())
        h, pl, _ = python_wpt(priv, key_alg, wit).split(".")
        cases = [
            ("wth of another WIT", python_wpt(priv, key_alg, wit, wth=token_hash(other_wit))),
            ("no wth", python_wpt(priv, key_alg, wit, wth=None)),
            ("aud another target", python_wpt(priv, key_alg, wit,
                                              target="https://consul.example.com/")),
            ("aud with the query kept", python_wpt(priv, key_alg, wit,
                                                   target=POP_TARGET + "?q=1")),
            ("expired an hour ago", python_wpt(priv, key_alg, wit, now=now - 3600)),
            ("exp an hour ahead", python_wpt(priv, key_alg, wit, exp=now + 3600)),
            ("no jti", python_wpt(priv, key_alg, wit, jti=None)),
            ("typ JWT", python_wpt(priv, key_alg, wit, headers={"typ": "JWT"})),
            ("a kid in the header", python_wpt(priv, key_alg, wit,
                                               headers={"typ": "wpt+jwt", "kid": "k"})),
            ("signed by another %s key" % key_alg,
             python_wpt(python_key(key_alg), key_alg, wit)),
            ("%s under a %s cnf.jwk" % (other_alg, key_alg),
             python_wpt(python_key(other_alg), other_alg, wit)),
            ("alg none", jwt.encode({"aud": POP_TARGET, "exp": now + 60,
                                     "jti": b64url_encode(os.urandom(16)),
                                     "wth": token_hash(wit)}, None, algorithm="none",
                                    headers={"typ": "wpt+jwt"})),
            ("flipped signature bit", tamper_signature(python_wpt(priv, key_alg, wit))),
            ("the WIT as its own proof", wit),
        ]
        problems = []
        for label, wpt in cases:
            got = p.call(op="verify_proof", wit=wit, wpt=wpt, target=POP_TARGET)
            if got.get("ok") is not False or got.get("code") != "WID_RESULT_PROOF_INVALID":
                problems.append("%s: %r, want WID_RESULT_PROOF_INVALID" % (label, got))
            else:
                print("    %s: %s" % (label, got["error"]))
        # The proof of one WIT with another WIT (the other WIT's key did not sign it).
        got = p.call(op="verify_proof", wit=other_wit, wpt=python_wpt(priv, key_alg, wit),
                     target=POP_TARGET)
        if got.get("code") != "WID_RESULT_PROOF_INVALID":
            problems.append("a proof presented with another WIT: %r" % got)
        # Nothing above was remembered: a fresh genuine proof still passes.
        got = p.call(op="verify_proof", wit=wit, wpt=python_wpt(priv, key_alg, wit),
                     target=POP_TARGET)
        if got.get("ok") is not True:
            problems.append("a genuine proof after the refusals: %r" % got)
        expect(not problems, "; ".join(problems))

    for key_alg in POP_KEY_ALGS:
        r.run("f3 PyJWT %s WPTs that must fail (wth, aud, exp, jti, typ, header, key, alg, none, "
              "signature, WIT as WPT, another WIT) -> PROOF_INVALID" % key_alg,
              lambda k=key_alg: f_pyjwt_wpt_refused(k))

    r.run("f4 pop_interop exits cleanly", p.close)


def main(argv):
    lib_path = argv[1] if len(argv) > 1 else os.environ.get("WID_LIB")
    if not lib_path:
        print("usage: pyjwt_interop.py PATH/TO/libworkload_identity.so [PATH/TO/pop_interop] "
              "(or WID_LIB=..., WID_POP_INTEROP=...)",
              file=sys.stderr)
        return 2
    pop_program = (argv[2] if len(argv) > 2 else os.environ.get("WID_POP_INTEROP")
                   or str(REPO_ROOT / "target/release/examples/pop_interop"))
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

    # ---- c. C ABI ES256 / RS256 -> PyJWT ----------------------------------

    def issue_alg(alg, issuer=None):
        req = REQUEST_MSGPACK.read_bytes()
        iss = issuer.encode() if issuer else None
        rc, detail, tok = wid.call_bytes(lib.wid_issue_alg, kr, alg, req, len(req),
                                         iss, len(iss) if iss else 0, now)
        expect(rc == WID_RESULT_OK, "wid_issue_alg(%d): %s" % (alg, detail))
        return tok.decode()

    def jwks_entry(kid):
        entries = [k for k in json.loads(jwks())["keys"] if k.get("kid") == kid]
        expect(len(entries) == 1, "JWKS has %d entries for kid %r" % (len(entries), kid))
        return entries[0]

    def check_issued_claims(claims, label):
        want = {
            "nomad_allocation_id": LIVE_ALLOC,
            "sub": SUBJECT,
            "nomad_job_id": "web",
            "nomad_namespace": "default",
            "nomad_task": "server",
            "aud": ["vault.io", "consul.io"],
            "iat": now,
            "nbf": now,
            "exp": now + 3600,
        }
        bad = {k: (claims.get(k), v) for k, v in want.items() if claims.get(k) != v}
        expect(not bad, "%s: claims differ (got, want): %r" % (label, bad))

    def c_no_active(alg, label):
        req = REQUEST_MSGPACK.read_bytes()
        rc, detail, _ = wid.call_bytes(lib.wid_issue_alg, kr, alg, req, len(req), None, 0, now)
        expect(rc == WID_RESULT_NO_ACTIVE_KEY,
               "wid_issue_alg(%s) before any %s key gave %s, want WID_RESULT_NO_ACTIVE_KEY"
               % (label, label, detail or "OK"))

    def c_issue_alg(alg, alg_name, issuer):
        c_no_active(alg, alg_name)
        rc, detail, kid = wid.call_bytes(lib.wid_keyring_rotate_alg, kr, alg, now)
        expect(rc == WID_RESULT_OK, "wid_keyring_rotate_alg(%s): %s" % (alg_name, detail))
        kid = kid.decode()
        expect(uuid.UUID(kid).version == 4 and str(uuid.UUID(kid)) == kid,
               "rotate_alg key ID %r is not a lower-case UUID v4" % kid)
        token = issue_alg(alg, issuer)
        header = jwt.get_unverified_header(token)
        expect(header == {"alg": alg_name, "kid": kid, "typ": "JWT"},
               "unexpected header %r" % header)
        doc = jwks()
        key = pyjwk_for(doc, token)
        expect(key.algorithm_name == alg_name,
               "PyJWK for %s has algorithm %r" % (kid, key.algorithm_name))
        kwargs = {"issuer": issuer} if issuer else {}
        claims = jwt.decode(token, key, algorithms=[alg_name], audience="vault.io", **kwargs)
        check_issued_claims(claims, alg_name)
        if issuer:
            expect(claims.get("iss") == issuer, "iss %r, want %r" % (claims.get("iss"), issuer))
        else:
            expect("iss" not in claims, "no issuer given but the token has iss %r"
                   % claims.get("iss"))
        # Audience: consul.io is the second audience; other.io is refused.
        jwt.decode(token, key, algorithms=[alg_name], audience="consul.io")
        try:
            jwt.decode(token, key, algorithms=[alg_name], audience="other.io")
        except jwt.InvalidAudienceError:
            pass
        else:
            raise CheckError("audience other.io did not raise InvalidAudienceError")
        for what, bad in (("payload", tamper_payload(token)),
                          ("signature", tamper_signature(token))):
            try:
                jwt.decode(bad, key, algorithms=[alg_name], audience="vault.io")
            except jwt.InvalidSignatureError:
                pass
            else:
                raise CheckError("%s-tampered token did not raise InvalidSignatureError" % what)
        # PyJWT must not accept it under another algorithm either.
        other = "RS256" if alg_name == "ES256" else "ES256"
        try:
            jwt.decode(token, key, algorithms=[other], audience="vault.io")
        except (jwt.InvalidAlgorithmError, jwt.InvalidKeyError):
            pass
        else:
            raise CheckError("PyJWT accepted the %s token with algorithms=[%s]" % (alg_name, other))
        # Our own verifier takes it too (same keyring).
        t = token.encode()
        rc, detail, _ = wid.call_bytes(lib.wid_verify, verifier, t, len(t), now)
        expect(rc == WID_RESULT_OK, "wid_verify of our own %s token: %s" % (alg_name, detail))
        state["issued_" + alg_name] = (kid, token)
        state["tokens_checked"] = state.get("tokens_checked", 0) + 1

    r.run("c1 wid_keyring_rotate_alg(ES256) + wid_issue_alg token verifies with PyJWT "
          "(JWKS EC entry, issuer, audience, tampering)",
          lambda: c_issue_alg(WID_ALG_ES256, "ES256", ISSUER))
    r.run("c2 wid_keyring_rotate_alg(RS256) + wid_issue_alg token verifies with PyJWT "
          "(JWKS RSA entry, no issuer, audience, tampering)",
          lambda: c_issue_alg(WID_ALG_RS256, "RS256", None))

    def c_jwks_shapes():
        expect("issued_ES256" in state and "issued_RS256" in state, "c1/c2 did not run")
        es_kid = state["issued_ES256"][0]
        rs_kid = state["issued_RS256"][0]
        ec_entry = jwks_entry(es_kid)
        expect(set(ec_entry) == {"kty", "crv", "x", "y", "kid", "alg", "use"},
               "EC entry members %r" % sorted(ec_entry))
        expect((ec_entry["kty"], ec_entry["crv"], ec_entry["alg"], ec_entry["use"])
               == ("EC", "P-256", "ES256", "sig"), "EC entry %r" % ec_entry)
        for c in ("x", "y"):
            expect(len(b64url_decode(ec_entry[c])) == 32 and "=" not in ec_entry[c],
                   "EC %s %r is not 32 bytes of unpadded base64url" % (c, ec_entry[c]))
        # The point is on P-256 (cryptography validates it).
        ec.EllipticCurvePublicNumbers(
            int.from_bytes(b64url_decode(ec_entry["x"]), "big"),
            int.from_bytes(b64url_decode(ec_entry["y"]), "big"),
            ec.SECP256R1()).public_key()
        rsa_entry = jwks_entry(rs_kid)
        expect(set(rsa_entry) == {"kty", "n", "e", "kid", "alg", "use"},
               "RSA entry members %r" % sorted(rsa_entry))
        expect((rsa_entry["kty"], rsa_entry["e"], rsa_entry["alg"], rsa_entry["use"])
               == ("RSA", "AQAB", "RS256", "sig"), "RSA entry %r" % rsa_entry)
        n = b64url_decode(rsa_entry["n"])
        expect(n[0] != 0, "RSA n has a leading zero byte")
        expect(int.from_bytes(n, "big").bit_length() == 2048,
               "rotate_alg(RS256) made a %d-bit key, want 2048"
               % int.from_bytes(n, "big").bit_length())
        # The EdDSA keys are still there, untouched.
        kinds = sorted(k["kty"] for k in json.loads(jwks())["keys"])
        expect(kinds.count("OKP") == 2, "JWKS key types %r, want the two EdDSA keys kept" % kinds)

    r.run("c3 JWKS EC and RSA entries have exactly the contract's members", c_jwks_shapes)

    # ---- d. PyJWT ES256 / RS256 -> C ABI ----------------------------------

    es_priv = derive_p256_private_key(ES256_MATERIAL, ES256_KEY_ID)
    rsa_priv = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def insert_alg(alg, kid, material, derivation, key_state=WID_KEY_STATE_INACTIVE, keyring=None):
        k = kid.encode()
        return lib.wid_keyring_insert_alg(keyring or kr, alg, k, len(k), material, len(material),
                                          derivation, key_state, now)

    def d_es256_insert():
        rc = insert_alg(WID_ALG_ES256, ES256_KEY_ID, ES256_MATERIAL, WID_KEY_DERIVATION_HKDF_V1)
        expect(rc == WID_RESULT_OK, "wid_keyring_insert_alg(ES256, HKDF_V1): " + wid.describe(rc))
        nums = es_priv.public_key().public_numbers()
        entry = jwks_entry(ES256_KEY_ID)
        want = (b64url_encode(nums.x.to_bytes(32, "big")), b64url_encode(nums.y.to_bytes(32, "big")))
        expect((entry.get("x"), entry.get("y")) == want,
               "JWKS (x, y) %r != derived in Python %r" % ((entry.get("x"), entry.get("y")), want))

    r.run("d0 ES256 key inserted with insert_alg(HKDF_V1): JWKS point = Python-derived point",
          d_es256_insert)

    def d_es256_issue_fresh_keyring():
        # The other direction: our keyring holds the material as its active
        # ES256 key and signs; PyJWT verifies with the key derived in Python
        # (not read from our JWKS).
        kr2 = ctypes.c_void_p()
        rc = lib.wid_keyring_new(ctypes.byref(kr2))
        expect(rc == WID_RESULT_OK, "wid_keyring_new: " + wid.describe(rc))
        try:
            rc = insert_alg(WID_ALG_ES256, ES256_KEY_ID, ES256_MATERIAL,
                            WID_KEY_DERIVATION_HKDF_V1, WID_KEY_STATE_ACTIVE, kr2)
            expect(rc == WID_RESULT_OK, "insert_alg(ES256, active): " + wid.describe(rc))
            req = REQUEST_MSGPACK.read_bytes()
            rc, detail, tok = wid.call_bytes(lib.wid_issue_alg, kr2, WID_ALG_ES256, req, len(req),
                                             None, 0, now)
            expect(rc == WID_RESULT_OK, "wid_issue_alg(ES256): " + detail)
            token = tok.decode()
            expect(jwt.get_unverified_header(token).get("kid") == ES256_KEY_ID,
                   "header %r" % jwt.get_unverified_header(token))
            claims = jwt.decode(token, es_priv.public_key(), algorithms=["ES256"],
                                audience="vault.io")
            check_issued_claims(claims, "ES256 (fresh keyring)")
            state["tokens_checked"] = state.get("tokens_checked", 0) + 1
        finally:
            lib.wid_keyring_free(kr2)

    r.run("d0b wid_issue_alg(ES256) with the inserted material verifies with PyJWT under the "
          "Python-derived public key", d_es256_issue_fresh_keyring)

    def d_rs256_insert():
        der = rsa_pkcs8_der(rsa_priv)
        rc = insert_alg(WID_ALG_RS256, RS256_KEY_ID, der, WID_KEY_DERIVATION_PKCS8)
        expect(rc == WID_RESULT_OK, "wid_keyring_insert_alg(RS256, PKCS8): " + wid.describe(rc))
        entry = jwks_entry(RS256_KEY_ID)
        n = rsa_priv.public_key().public_numbers().n
        want = b64url_encode(n.to_bytes((n.bit_length() + 7) // 8, "big"))
        expect(entry.get("n") == want and entry.get("e") == "AQAB",
               "JWKS RSA entry %r, want n %s..., e AQAB" % (entry, want[:16]))

    r.run("d1 RSA-2048 key (cryptography) inserted as PKCS#8 DER: JWKS n, e match", d_rs256_insert)

    def signed_by(alg_name, key, kid):
        def make(claims):
            return jwt.encode(claims, key, algorithm=alg_name, headers={"kid": kid})
        return make

    pyjwt_es256 = signed_by("ES256", es_priv, ES256_KEY_ID)
    pyjwt_rs256 = signed_by("RS256", rsa_priv, RS256_KEY_ID)

    def d_pyjwt_verifies(make, alg_name):
        claims = claims_for()
        token = make(claims)
        header = jwt.get_unverified_header(token)
        expect(header == {"alg": alg_name, "kid": header.get("kid"), "typ": "JWT"},
               "PyJWT header %r" % header)
        del lookups[:]
        rc, detail, out = verify(token)
        expect(rc == WID_RESULT_OK, "wid_verify: " + detail)
        got = json.loads(out)
        bad = {k: (got.get(k), claims[k]) for k in
               ("jti", "nomad_allocation_id", "sub", "nomad_job_id", "exp")
               if got.get(k) != claims[k]}
        expect(not bad, "claims differ (got, want): %r" % bad)
        expect(lookups == [(LIVE_ALLOC, WID_CONSISTENCY_STALE)],
               "lookup callback calls %r, want one STALE lookup of %s" % (lookups, LIVE_ALLOC))
        # A few more, so one lucky signature cannot pass the check.
        for i in range(4):
            rc, detail, _ = verify(make(claims_for()))
            expect(rc == WID_RESULT_OK, "wid_verify (token %d): %s" % (i + 2, detail))
        state["tokens_checked"] = state.get("tokens_checked", 0) + 5

    r.run("d2 PyJWT ES256 tokens (Python-derived P-256 key) verify with wid_verify (5 tokens)",
          lambda: d_pyjwt_verifies(pyjwt_es256, "ES256"))
    r.run("d3 PyJWT RS256 tokens (cryptography RSA-2048, PKCS#8) verify with wid_verify (5 tokens)",
          lambda: d_pyjwt_verifies(pyjwt_rs256, "RS256"))

    def d_rejections(make):
        expect_rejected(make(claims_for(aud="other.io")), WID_RESULT_AUDIENCE_MISMATCH)
        expect_rejected(tamper_payload(make(claims_for())), WID_RESULT_BAD_SIGNATURE)
        expect_rejected(tamper_signature(make(claims_for())), WID_RESULT_BAD_SIGNATURE)
        del lookups[:]
        expect_rejected(make(claims_for(alloc=MISSING_ALLOC)), WID_RESULT_ALLOCATION_NOT_FOUND)

    r.run("d4 PyJWT ES256: wrong aud, tampered payload/signature, missing allocation -> "
          "AUDIENCE_MISMATCH, BAD_SIGNATURE x2, ALLOCATION_NOT_FOUND",
          lambda: d_rejections(pyjwt_es256))
    r.run("d5 PyJWT RS256: wrong aud, tampered payload/signature, missing allocation -> "
          "AUDIENCE_MISMATCH, BAD_SIGNATURE x2, ALLOCATION_NOT_FOUND",
          lambda: d_rejections(pyjwt_rs256))

    def d_high_s():
        # DESIGN.md: high s is accepted (other JOSE libraries make it).
        token = pyjwt_es256(claims_for())
        h, p, sig = token.split(".")
        raw = b64url_decode(sig)
        r_, s_ = int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big")
        flipped = P256_N - s_
        high = b64url_encode(r_.to_bytes(32, "big") + flipped.to_bytes(32, "big"))
        for label, tok in (("original", token), ("s -> n - s", ".".join((h, p, high)))):
            rc, detail, _ = verify(tok)
            expect(rc == WID_RESULT_OK, "%s signature: wid_verify: %s" % (label, detail))

    r.run("d6 ES256 signature with s and with n - s (high/low s) both verify", d_high_s)

    # ---- e. Algorithm confusion and bad keys -------------------------------

    rs_pub_pem = rsa_priv.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    def e_hs256_rsa_pem():
        # PyJWT itself refuses a PEM public key as an HMAC secret, so the token
        # is put together by hand with PyJWT's own HMAC-SHA256 signer.
        try:
            jwt.encode(claims_for(), rs_pub_pem, algorithm="HS256", headers={"kid": RS256_KEY_ID})
        except jwt.InvalidKeyError as e:
            print("    note: PyJWT refuses to encode it (%s); signing by hand" % e)
        hs = jwt.algorithms.HMACAlgorithm(jwt.algorithms.HMACAlgorithm.SHA256)
        for kid in (RS256_KEY_ID, state["issued_RS256"][0]):
            token = forge({"alg": "HS256", "kid": kid, "typ": "JWT"}, claims_for(),
                          lambda m: hs.sign(m, rs_pub_pem))
            # PyJWT's HMAC verify would accept it with the PEM as the secret:
            # this is a real key-confusion token.
            expect(hs.verify(token.rsplit(".", 1)[0].encode(), rs_pub_pem,
                             b64url_decode(token.rsplit(".", 1)[1])),
                   "forged token does not verify under HMAC(PEM)")
            expect_rejected(token, WID_RESULT_UNSUPPORTED_ALGORITHM)

    r.run("e1 HS256 keyed with our RSA public key PEM (RSA kids) -> UNSUPPORTED_ALGORITHM",
          e_hs256_rsa_pem)

    def e_alg_none():
        kids = (ES256_KEY_ID, RS256_KEY_ID, KEY_ID)
        for kid in kids:
            token = jwt.encode(claims_for(), None, algorithm="none", headers={"kid": kid})
            expect(token.endswith("."), "PyJWT alg none token %r has a signature" % token)
            expect(jwt.get_unverified_header(token).get("alg") == "none",
                   "header %r" % jwt.get_unverified_header(token))
            expect_rejected(token, WID_RESULT_UNSUPPORTED_ALGORITHM)
            # ... also with a signature of the key's usual length appended.
            h, p, _ = token.split(".")
            expect_rejected("%s.%s.%s" % (h, p, b64url_encode(b"\x01" * 64)),
                            WID_RESULT_UNSUPPORTED_ALGORITHM)

    r.run("e2 alg none (ES256, RS256, EdDSA kids; empty and 64-byte signature) -> "
          "UNSUPPORTED_ALGORITHM", e_alg_none)

    def e_cross_alg():
        rs_sign = jwt.algorithms.RSAAlgorithm(jwt.algorithms.RSAAlgorithm.SHA256)
        es_sign = jwt.algorithms.ECAlgorithm(jwt.algorithms.ECAlgorithm.SHA256)
        ed_sign = jwt.algorithms.OKPAlgorithm()
        rs = lambda m: rs_sign.sign(m, rsa_priv)  # noqa: E731 -- 256 bytes
        es = lambda m: es_sign.sign(m, es_priv)  # noqa: E731 -- 64 bytes, r || s
        ed = lambda m: ed_sign.sign(m, priv)  # noqa: E731 -- 64 bytes
        es_rot = state["issued_ES256"][0]
        rs_rot = state["issued_RS256"][0]
        U, M = WID_RESULT_UNSUPPORTED_ALGORITHM, WID_RESULT_MALFORMED_TOKEN
        # (label, header alg, kid, signer, want). The header's alg must be the
        # algorithm of the key its kid names, else UNSUPPORTED_ALGORITHM before
        # anything looks at the signature; when it is, a signature of the wrong
        # size for that key is MALFORMED_TOKEN (src/jwt.rs, src/verify/rules.rs
        # check_alg), never a signature check under another algorithm.
        cases = [
            ("RS256-signed, header ES256, RSA kid", "ES256", RS256_KEY_ID, rs, U),
            ("RS256-signed, header ES256, rotated RSA kid", "ES256", rs_rot, rs, U),
            ("RS256-signed, header RS256, ES256 kid", "RS256", ES256_KEY_ID, rs, U),
            ("RS256-signed, header RS256, EdDSA kid", "RS256", KEY_ID, rs, U),
            ("ES256-signed, header ES256, RSA kid", "ES256", RS256_KEY_ID, es, U),
            ("ES256-signed, header EdDSA, ES256 kid", "EdDSA", ES256_KEY_ID, es, U),
            ("ES256-signed, header ES256, EdDSA kid", "ES256", KEY_ID, es, U),
            ("EdDSA-signed, header ES256, EdDSA kid", "ES256", KEY_ID, ed, U),
            ("EdDSA-signed, header EdDSA, ES256 kid", "EdDSA", ES256_KEY_ID, ed, U),
            ("EdDSA-signed, header Ed25519, RSA kid", "Ed25519", RS256_KEY_ID, ed, U),
            # Header alg = the kid's key's alg, signature of another algorithm:
            ("RS256-signed, header ES256, ES256 kid", "ES256", ES256_KEY_ID, rs, M),
            ("RS256-signed, header ES256, rotated ES256 kid", "ES256", es_rot, rs, M),
            ("ES256-signed, header RS256, RSA kid", "RS256", RS256_KEY_ID, es, M),
            # 64 bytes either way: reaches the signature check, which fails.
            ("EdDSA-signed, header ES256, ES256 kid", "ES256", ES256_KEY_ID, ed,
             WID_RESULT_BAD_SIGNATURE),
        ]
        problems = []
        for label, alg, kid, sign, want in cases:
            token = forge({"alg": alg, "kid": kid, "typ": "JWT"}, claims_for(), sign)
            rc, detail, _ = verify(token)
            if rc != want:
                problems.append("%s: wid_verify gave %s, want %s"
                                % (label, detail or "OK (0)", wid.name(want)))
            else:
                print("    %s: %s" % (label, detail))
        expect(not problems, "; ".join(problems))

    r.run("e3 header alg vs the kid's key (14 forged tokens): another algorithm than the key's "
          "-> UNSUPPORTED_ALGORITHM; the key's alg with a wrong-size signature -> "
          "MALFORMED_TOKEN", e_cross_alg)

    def e_other_algs():
        # PS256 and ES384/HS512 never pass, whatever the kid.
        ps = jwt.encode(claims_for(), rsa_priv, algorithm="PS256", headers={"kid": RS256_KEY_ID})
        expect_rejected(ps, WID_RESULT_UNSUPPORTED_ALGORITHM)
        rs384 = jwt.encode(claims_for(), rsa_priv, algorithm="RS384",
                           headers={"kid": RS256_KEY_ID})
        expect_rejected(rs384, WID_RESULT_UNSUPPORTED_ALGORITHM)

    r.run("e4 PS256 and RS384 by the RS256 key -> UNSUPPORTED_ALGORITHM", e_other_algs)

    def e_bad_keys():
        cases = []
        small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
        cases.append(("RSA-1024 PKCS#8", WID_ALG_RS256, rsa_pkcs8_der(small),
                      WID_KEY_DERIVATION_PKCS8))
        e3 = rsa.generate_private_key(public_exponent=3, key_size=2048)
        cases.append(("RSA-2048 e=3 PKCS#8", WID_ALG_RS256, rsa_pkcs8_der(e3),
                      WID_KEY_DERIVATION_PKCS8))
        p256_pk8 = es_priv.private_bytes(serialization.Encoding.DER,
                                         serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption())
        cases.append(("P-256 PKCS#8 as RS256", WID_ALG_RS256, p256_pk8, WID_KEY_DERIVATION_PKCS8))
        cases.append(("RSA-2048 PKCS#8 with HKDF_V1", WID_ALG_RS256, rsa_pkcs8_der(rsa_priv),
                      WID_KEY_DERIVATION_HKDF_V1))
        cases.append(("ES256 with NOMAD_RAW_SEED", WID_ALG_ES256, ES256_MATERIAL,
                      WID_KEY_DERIVATION_NOMAD_RAW_SEED))
        cases.append(("ES256 with PKCS8", WID_ALG_ES256, p256_pk8, WID_KEY_DERIVATION_PKCS8))
        cases.append(("ES256 with 31 bytes", WID_ALG_ES256, ES256_MATERIAL[:31],
                      WID_KEY_DERIVATION_HKDF_V1))
        cases.append(("unknown alg 4", 4, ES256_MATERIAL, WID_KEY_DERIVATION_HKDF_V1))
        before = jwks()
        problems = []
        for i, (label, alg, material, derivation) in enumerate(cases):
            kid = "bad-key-%d" % i
            rc = insert_alg(alg, kid, material, derivation)
            detail = wid.describe(rc) if rc != WID_RESULT_OK else "OK"
            if rc != WID_RESULT_INVALID_ARGUMENT:
                problems.append("%s: %s, want WID_RESULT_INVALID_ARGUMENT" % (label, detail))
            else:
                print("    %s refused: %s" % (label, detail))
        expect(not problems, "; ".join(problems))
        expect(jwks() == before, "the JWKS changed after refused inserts")

    r.run("e5 insert_alg refuses RSA-1024, e=3, wrong material/derivation pairings, unknown alg "
          "-> INVALID_ARGUMENT, keyring unchanged", e_bad_keys)

    pop_checks(r, state, pop_program)

    print("pyjwt interop: tokens verified across implementations: %d"
          % state.get("tokens_checked", 0))

    lib.wid_verifier_free(verifier)
    lib.wid_keyring_free(kr)
    del lookup_cb

    print("pyjwt interop: %d checks, %d failed" % (r.total, r.failed))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
