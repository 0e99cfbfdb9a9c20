#!/usr/bin/env python3
"""A stand-in for Consul's ACL HTTP API, for testing ConsulLogin.

No real Consul can be had on our machines (its licence keeps it out of every
registry we reach), so this server follows Consul's documented ACL HTTP API
(developer.hashicorp.com/consul/api-docs/acl and its auth-method, binding-rule,
token and login pages; the JWT auth method's page) field by field, and Consul's
source (hashicorp/consul: agent/acl_endpoint.go, agent/http.go, acl/errors.go,
agent/consul/auth/{login,binder,token_writer}.go, internal/go-sso/oidcauth/jwt.go)
for status codes and error texts. NONE of it was checked against a live Consul.

What comes from where:
  * Status codes and texts of errors (text/plain bodies, as Consul's HTTP layer
    writes them): 401 "ACL support disabled" when ACLs are off; 403 "ACL not
    found" for an unknown token (and for an unknown auth method: 'ACL not found:
    auth method "x" not found'); 403 "Permission denied" when no binding rule
    matches; 403 "Permission denied: token wasn't created via login" for a logout
    of another token; the JWT auth method's texts ("error validating claims: aud
    claim does not match any bound audience", go-jose's "... invalid issuer claim
    (iss)", "... token is expired (exp)", "... token not valid yet (nbf)",
    go-oidc's "failed to verify id token signature", "no known key successfully
    validated the token signature") as HTTP 500, the status Consul gives errors
    of no known type: from Consul's source.
  * The JWT checks: the signature with the keys of JWKSURL (fetched over http, or
    https trusting JWKSCACert; refetched when no cached key verifies, as go-oidc
    does) or JWTValidationPubKeys; BoundIssuer; then nbf, exp, iat with
    ClockSkewLeeway (0 means 60 s, negative means none); a token without exp
    expires ExpirationLeeway after iat/nbf (0 means 150 s); without nbf it is
    valid from iat (or NotBeforeLeeway before exp); BoundAudiences (a token with
    an aud and no bound audiences is refused): from Consul's source (oidcauth).
  * JWTSupportedAlgs: the documentation says it lists the algorithms allowed; the
    source's JWKS and static-key paths do not check it. Here it is checked when
    given (go-oidc's "id token signed with unsupported algorithm" text), and any
    asymmetric algorithm passes when it is not. OIDCDiscoveryURL is refused here.
  * ClaimMappings (value.<name>, strings, numbers and booleans as strings) and
    ListClaimMappings (list.<name>); binding-rule Selectors in the subset of
    go-bexpr the documentation shows (value.x == "y", value.x != "y",
    "y" in list.x, "y" not in list.x, and, or, not, parentheses); a selector that
    names a missing field does not match (go-bexpr's evaluation error, which
    Consul counts as no match); BindName templates ${value.x}, lower-cased and
    checked as service/node identity names; role and policy binds name existing
    roles and policies (none: no binding): from the documentation and binder.go.
  * Tokens: AccessorID and SecretID UUIDs, Description "token created via login"
    (+ ": " and the Meta as JSON), ServiceIdentities / NodeIdentities / Roles /
    Policies per bind type, AuthMethod, Local (TokenLocality != "global"),
    CreateTime, ExpirationTime = CreateTime + MaxTokenTTL when set, Namespace and
    Partition when given; an expired token is gone (as Consul's reaper makes it,
    here at once): from the documentation and login.go.
  * Stand-in only, NOT Consul: GET /v1/standin/requests (how many logins,
    logouts and token/self calls were made, for tests that must prove none was
    sent). The management token is given with --bootstrap-token.

Usage: consul_standin.py --listen 127.0.0.1:0 --bootstrap-token SECRET [--acl-disabled]
The first line on stdout is "listening on http://HOST:PORT".
"""

import argparse
import base64
import datetime as dt
import json
import re
import ssl
import sys
import threading
import time
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

try:
    import jwt  # PyJWT
    from cryptography.hazmat.primitives import serialization
except ImportError as e:  # pragma: no cover
    sys.stderr.write(
        'consul_standin.py needs PyJWT and cryptography: pip install "PyJWT[crypto]" cryptography (%s)\n'
        % e
    )
    sys.exit(3)

ANONYMOUS_ACCESSOR = "00000000-0000-0000-0000-000000000002"
MANAGEMENT_POLICY = {"ID": "00000000-0000-0000-0000-000000000001", "Name": "global-management"}
ASYMMETRIC = {"RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "EdDSA"}
SERVICE_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9\-_]*[a-z0-9])?$")
JOSE = "go-jose/go-jose/jwt: "


class HTTPError(Exception):
    def __init__(self, status, text):
        super().__init__(text)
        self.status = status
        self.text = text


def now_s():
    return time.time()


def rfc3339(t):
    d = dt.datetime.fromtimestamp(t, dt.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def go_duration(v, field):
    """A Go time.Duration as JSON gives it: nanoseconds, or a string like "30s"."""
    if v is None or v == "":
        return 0.0
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v / 1e9
    if isinstance(v, str):
        units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
        m = re.fullmatch(r"(-?)((?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+)", v)
        if m:
            total = sum(
                float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)", m.group(2))
            )
            return -total if m.group(1) else total
        if v == "0":
            return 0.0
    raise HTTPError(400, "Invalid %s: time: invalid duration %s" % (field, json.dumps(v)))


# ---- a small go-bexpr subset -------------------------------------------------

TOKEN_RE = re.compile(r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<op>==|!=|\(|\))|(?P<word>[A-Za-z0-9_.\-/]+))')


class Missing(Exception):
    pass


def tokenize(s):
    out, i = [], 0
    while i < len(s):
        if s[i:].strip() == "":
            break
        m = TOKEN_RE.match(s, i)
        if not m or m.end() == i:
            raise ValueError("unexpected %r at offset %d" % (s[i:i + 10], i))
        if m.group("str"):
            out.append(("str", json.loads(m.group("str"))))
        elif m.group("op"):
            out.append(("op", m.group("op")))
        else:
            out.append(("word", m.group("word")))
        i = m.end()
    return out


class Selector:
    def __init__(self, text):
        self.toks = tokenize(text)
        self.i = 0
        self.tree = self.parse_or()
        if self.i != len(self.toks):
            raise ValueError("unexpected %r" % (self.toks[self.i][1],))

    def peek(self, kind=None, value=None):
        if self.i >= len(self.toks):
            return False
        k, v = self.toks[self.i]
        return (kind is None or k == kind) and (value is None or v == value)

    def take(self):
        if self.i >= len(self.toks):
            raise ValueError("unexpected end of selector")
        t = self.toks[self.i]
        self.i += 1
        return t

    def parse_or(self):
        left = self.parse_and()
        while self.peek("word", "or"):
            self.take()
            left = ("or", left, self.parse_and())
        return left

    def parse_and(self):
        left = self.parse_unary()
        while self.peek("word", "and"):
            self.take()
            left = ("and", left, self.parse_unary())
        return left

    def parse_unary(self):
        if self.peek("word", "not"):
            self.take()
            return ("not", self.parse_unary())
        if self.peek("op", "("):
            self.take()
            e = self.parse_or()
            if self.take() != ("op", ")"):
                raise ValueError("expected )")
            return e
        return self.parse_match()

    def selector(self):
        k, v = self.take()
        if k != "word" or not re.fullmatch(r"(value|list)\.[A-Za-z0-9_\-]+", v):
            raise ValueError("%r is not a selector (value.<name> or list.<name>)" % (v,))
        return v.split(".", 1)

    def value(self):
        k, v = self.take()
        if k not in ("str", "word") or v in ("and", "or", "not", "in"):
            raise ValueError("expected a value, got %r" % (v,))
        return v

    def parse_match(self):
        if self.peek("word") and re.match(r"(value|list)\.", self.toks[self.i][1]):
            sel = self.selector()
            k, op = self.take()
            if op not in ("==", "!="):
                raise ValueError("expected == or != after %s" % ".".join(sel))
            return (op, sel, self.value())
        val = self.value()
        negate = False
        if self.peek("word", "not"):
            self.take()
            negate = True
        if self.take() != ("word", "in"):
            raise ValueError("expected 'in' after %r" % (val,))
        e = ("in", self.selector(), val)
        return ("not", e) if negate else e

    def matches(self, fields):
        try:
            return self.eval(self.tree, fields)
        except Missing:
            return False

    def eval(self, e, f):
        op = e[0]
        if op == "or":
            return self.eval(e[1], f) or self.eval(e[2], f)
        if op == "and":
            return self.eval(e[1], f) and self.eval(e[2], f)
        if op == "not":
            return not self.eval(e[1], f)
        (space, name), val = e[1], e[2]
        if name not in f[space]:
            raise Missing()
        got = f[space][name]
        if op == "==":
            return space == "value" and got == val
        if op == "!=":
            return space == "value" and got != val
        return val in got if isinstance(got, list) else False


def interpolate(template, projected, field):
    def sub(m):
        name = m.group(1).strip()
        if name not in projected:
            raise HTTPError(500, 'error interpreting template: unknown variable accessed: %s' % name)
        return projected[name]

    return re.sub(r"\$\{([^}]*)\}", sub, template)


# ---- the server's state ------------------------------------------------------


class State:
    def __init__(self, bootstrap, datacenter, acl_disabled):
        self.lock = threading.Lock()
        self.datacenter = datacenter
        self.acl_disabled = acl_disabled
        self.methods = {}
        self.rules = {}
        self.policies = {}
        self.roles = {}
        self.tokens = {}  # accessor -> token
        self.index = 10
        self.counts = {"login": 0, "logout": 0, "token_self": 0}
        self.jwks_cache = {}
        mgmt = self.new_token(
            {"Description": "Bootstrap Token (Global Management)", "Policies": [MANAGEMENT_POLICY], "Local": False},
            secret=bootstrap,
        )
        self.management_secret = mgmt["SecretID"]

    def next_index(self):
        self.index += 1
        return self.index

    def new_token(self, fields, secret=None):
        created = now_s()
        t = {
            "AccessorID": str(uuid.uuid4()),
            "SecretID": secret or str(uuid.uuid4()),
            "Description": "",
            "Policies": None,
            "Roles": None,
            "ServiceIdentities": None,
            "NodeIdentities": None,
            "Local": False,
            "CreateTime": rfc3339(created),
            "Hash": base64.b64encode(uuid.uuid4().bytes).decode(),
            "CreateIndex": self.next_index(),
        }
        t.update(fields)
        t["ModifyIndex"] = t["CreateIndex"]
        t["_expires"] = None
        self.tokens[t["AccessorID"]] = t
        return t

    def purge(self):
        n = now_s()
        for a in [a for a, t in self.tokens.items() if t.get("_expires") is not None and t["_expires"] <= n]:
            del self.tokens[a]

    def by_secret(self, secret):
        self.purge()
        for t in self.tokens.values():
            if t["SecretID"] == secret:
                return t
        return None

    def require_management(self, secret, level):
        if not secret:
            raise HTTPError(
                403,
                "Permission denied: anonymous token lacks permission 'acl:%s'. The anonymous token is used implicitly when a request does not specify a token." % level,
            )
        t = self.by_secret(secret)
        if t is None:
            raise HTTPError(403, "ACL not found")
        if not any(p.get("Name") == "global-management" for p in (t.get("Policies") or [])):
            raise HTTPError(403, "Permission denied: token with AccessorID '%s' lacks permission 'acl:%s'" % (t["AccessorID"], level))


def public(t):
    return {k: v for k, v in t.items() if not k.startswith("_") and v is not None}


# ---- the JWT auth method -----------------------------------------------------


def fetch(url, ca_pem):
    ctx = None
    if url.startswith("https://"):
        ctx = ssl.create_default_context(cadata=ca_pem) if ca_pem else ssl.create_default_context()
    with urllib.request.urlopen(url, timeout=5, context=ctx) as r:
        return json.loads(r.read().decode())


def jwks_keys(state, method, refresh):
    cfg = method["Config"]
    url = cfg["JWKSURL"]
    if refresh or url not in state.jwks_cache:
        try:
            doc = fetch(url, cfg.get("JWKSCACert") or None)
        except Exception as e:  # noqa: BLE001 - the text is Consul's answer
            raise HTTPError(500, "error verifying token: fetching keys oidc: get keys failed: %s" % e)
        keys = []
        for k in doc.get("keys", []):
            try:
                keys.append(jwt.PyJWK(k))
            except Exception:  # noqa: BLE001 - go-jose skips keys it cannot use
                continue
        state.jwks_cache[url] = keys
    return state.jwks_cache[url]


def verify_signature(state, method, token):
    cfg = method["Config"]
    try:
        header = jwt.get_unverified_header(token)
    except Exception as e:  # noqa: BLE001
        raise HTTPError(500, "error verifying token: oidc: malformed jwt: %s" % e)
    alg = header.get("alg")
    allowed = cfg.get("JWTSupportedAlgs") or []
    if allowed and alg not in allowed:
        raise HTTPError(
            500,
            "error verifying token: oidc: id token signed with unsupported algorithm, expected %s got %s"
            % ("[" + " ".join(json.dumps(a) for a in allowed) + "]", json.dumps(alg)),
        )
    if alg not in ASYMMETRIC:
        raise HTTPError(500, "error verifying token: oidc: malformed jwt: unexpected signature algorithm %s" % json.dumps(alg))
    opts = {"verify_signature": True, "verify_exp": False, "verify_nbf": False, "verify_iat": False, "verify_aud": False, "verify_iss": False}
    if cfg.get("JWKSURL"):
        for refresh in (False, True):
            for k in jwks_keys(state, method, refresh):
                if header.get("kid") and k.key_id != header.get("kid"):
                    continue
                try:
                    return jwt.decode(token, k.key, algorithms=[alg], options=opts)
                except jwt.InvalidTokenError:
                    continue
        raise HTTPError(500, "error verifying token: failed to verify id token signature")
    for pem in cfg.get("JWTValidationPubKeys") or []:
        try:
            key = serialization.load_pem_public_key(pem.encode())
            return jwt.decode(token, key, algorithms=[alg], options=opts)
        except Exception:  # noqa: BLE001
            continue
    raise HTTPError(500, "no known key successfully validated the token signature")


def leeway_of(cfg, field, default):
    v = go_duration(cfg.get(field), field)
    if v < 0:
        return 0.0
    return default if v == 0 else v


def validate_claims(method, claims):
    cfg = method["Config"]
    num = lambda k: claims.get(k) if isinstance(claims.get(k), (int, float)) and not isinstance(claims.get(k), bool) else 0
    iat, exp, nbf = num("iat"), num("exp"), num("nbf")
    if iat == 0 and exp == 0 and nbf == 0:
        raise HTTPError(500, "no issue time, notbefore, or expiration time encoded in token")
    if exp == 0:
        exp = max(iat, nbf) + leeway_of(cfg, "ExpirationLeeway", 150.0)
    if nbf == 0:
        nbf = iat if iat != 0 else exp - leeway_of(cfg, "NotBeforeLeeway", 150.0)
    skew = leeway_of(cfg, "ClockSkewLeeway", 60.0)
    bound_iss = cfg.get("BoundIssuer") or ""
    if bound_iss and claims.get("iss") != bound_iss:
        raise HTTPError(500, "error validating claims: " + JOSE + "validation failed, invalid issuer claim (iss)")
    n = now_s()
    if n + skew < nbf:
        raise HTTPError(500, "error validating claims: " + JOSE + "validation failed, token not valid yet (nbf)")
    if n - skew > exp:
        raise HTTPError(500, "error validating claims: " + JOSE + "validation failed, token is expired (exp)")
    if iat and n + skew < iat:
        raise HTTPError(500, "error validating claims: " + JOSE + "validation field, token issued in the future (iat)")
    aud = claims.get("aud")
    aud = [aud] if isinstance(aud, str) else (aud or [])
    bound = cfg.get("BoundAudiences") or []
    if not bound and aud:
        raise HTTPError(500, "error validating claims: audience claim found in JWT but no audiences are bound")
    if bound and not any(b in aud for b in bound):
        raise HTTPError(500, "error validating claims: aud claim does not match any bound audience")


def map_claims(method, claims):
    cfg = method["Config"]
    fields = {"value": {}, "list": {}}
    for claim, name in (cfg.get("ClaimMappings") or {}).items():
        v = claims.get(claim)
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, (int, float)):
            v = str(int(v)) if float(v).is_integer() else str(v)
        elif not isinstance(v, str):
            raise HTTPError(500, "error converting claim '%s' to string" % claim)
        fields["value"][name] = v
    for claim, name in (cfg.get("ListClaimMappings") or {}).items():
        v = claims.get(claim)
        if v is None:
            continue
        items = v if isinstance(v, list) else [v]
        fields["list"][name] = [str(x) for x in items]
    return fields


def login(state, body, query):
    name = body.get("AuthMethod") or ""
    method = state.methods.get(name)
    if method is None:
        raise HTTPError(403, 'ACL not found: auth method "%s" not found' % name)
    bearer = body.get("BearerToken") or ""
    if not bearer:
        raise HTTPError(500, "missing jwt")
    claims = verify_signature(state, method, bearer)
    validate_claims(method, claims)
    fields = map_claims(method, claims)
    projected = {"value." + k: v for k, v in fields["value"].items()}
    out = {"ServiceIdentities": [], "NodeIdentities": [], "Roles": [], "Policies": []}
    for rule in sorted(state.rules.values(), key=lambda r: r["CreateIndex"]):
        if rule["AuthMethod"] != name:
            continue
        if rule.get("Selector") and not Selector(rule["Selector"]).matches(fields):
            continue
        raw = interpolate(rule["BindName"], projected, "BindName")
        kind = rule["BindType"]
        if kind in ("service", "node"):
            low = raw.lower()
            if low != raw:
                raise HTTPError(
                    500,
                    "invalid bind name: the projected variables contain uppercase characters (interpolated as %s before lowercasing), but bind names for this type must be lowercase; ensure the bound service or node name is lowercase" % json.dumps(raw),
                )
            if not SERVICE_NAME_RE.match(low):
                raise HTTPError(500, "invalid bind name: %s" % json.dumps(low))
            if kind == "service":
                out["ServiceIdentities"].append({"ServiceName": low})
            else:
                out["NodeIdentities"].append({"NodeName": low, "Datacenter": state.datacenter})
        elif kind == "role":
            role = next((r for r in state.roles.values() if r["Name"] == raw), None)
            if role:
                out["Roles"].append({"ID": role["ID"], "Name": role["Name"]})
        elif kind == "policy":
            pol = next((p for p in state.policies.values() if p["Name"] == raw), None)
            if pol:
                out["Policies"].append({"ID": pol["ID"], "Name": pol["Name"]})
    if not any(out.values()):
        raise HTTPError(403, "Permission denied")
    meta = body.get("Meta") or {}
    desc = "token created via login"
    if meta:
        desc += ": " + json.dumps(dict(sorted(meta.items())), separators=(",", ":"))
    fields_t = {
        "Description": desc,
        "Local": method.get("TokenLocality") != "global",
        "AuthMethod": name,
    }
    for k, v in out.items():
        if v:
            fields_t[k] = v
    ns = body.get("Namespace") or (query.get("ns") or [None])[0]
    part = body.get("Partition") or (query.get("partition") or [None])[0]
    if ns:
        fields_t["Namespace"] = ns
    if part:
        fields_t["Partition"] = part
    ttl = method.get("_ttl", 0.0)
    tok = state.new_token(fields_t)
    if ttl > 0:
        created = dt.datetime.strptime(tok["CreateTime"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc).timestamp()
        tok["_expires"] = created + ttl
        tok["ExpirationTime"] = rfc3339(created + ttl)
    return public(tok)


# ---- HTTP --------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "consul-standin"

    def log_message(self, fmt, *args):  # quiet: tests read stdout's first line only
        pass

    def reply(self, status, obj=None, text=None):
        if text is not None:
            body, ctype = text.encode(), "text/plain; charset=utf-8"
        else:
            body, ctype = json.dumps(obj).encode(), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Consul-Index", str(self.server.state.index))
        self.end_headers()
        self.wfile.write(body)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw.strip():
            return {}
        try:
            v = json.loads(raw)
        except ValueError as e:
            raise HTTPError(400, "Request decoding failed: %s" % e)
        if not isinstance(v, dict):
            raise HTTPError(400, "Request decoding failed: not an object")
        return v

    def token(self):
        t = self.headers.get("X-Consul-Token")
        if t:
            return t
        auth = self.headers.get("Authorization") or ""
        if auth.startswith("Bearer "):
            return auth[7:].strip()
        return ""

    def handle_any(self, method):
        st = self.server.state
        url = urlsplit(self.path)
        path, query = url.path, parse_qs(url.query)
        try:
            with st.lock:
                status, obj = self.route(st, method, path, query)
            self.reply(status, obj)
        except HTTPError as e:
            self.reply(e.status, text=e.text)
        except Exception as e:  # noqa: BLE001 - as Consul: a 500 with the error's text
            self.reply(500, text=str(e))

    def do_GET(self):
        self.handle_any("GET")

    def do_PUT(self):
        self.handle_any("PUT")

    def do_POST(self):
        self.handle_any("POST")

    def do_DELETE(self):
        self.handle_any("DELETE")

    def route(self, st, m, path, q):
        if path == "/v1/standin/requests" and m == "GET":
            return 200, dict(st.counts)
        if not path.startswith("/v1/acl/"):
            raise HTTPError(404, "Invalid URL path: not a recognized HTTP API endpoint")
        if st.acl_disabled:
            raise HTTPError(401, "ACL support disabled")
        tok = self.token()
        rest = path[len("/v1/acl/"):]
        if rest == "login":
            if m != "POST":
                raise HTTPError(405, "method %s not allowed" % m)
            st.counts["login"] += 1
            return 200, login(st, self.body(), q)
        if rest == "logout":
            if m != "POST":
                raise HTTPError(405, "method %s not allowed" % m)
            st.counts["logout"] += 1
            t = st.by_secret(tok) if tok else None
            if t is None:
                raise HTTPError(403, "ACL not found")
            if not t.get("AuthMethod"):
                raise HTTPError(403, "Permission denied: token wasn't created via login")
            del st.tokens[t["AccessorID"]]
            return 200, True
        if rest == "token/self" and m == "GET":
            st.counts["token_self"] += 1
            if not tok:
                return 200, {"AccessorID": ANONYMOUS_ACCESSOR, "SecretID": "anonymous", "Description": "Anonymous Token", "Local": False}
            t = st.by_secret(tok)
            if t is None:
                raise HTTPError(403, "ACL not found")
            return 200, public(t)
        if rest == "tokens" and m == "GET":
            st.require_management(tok, "read")
            want = (q.get("authmethod") or [None])[0]
            return 200, [public(t) for t in st.tokens.values() if want is None or t.get("AuthMethod") == want]
        if rest.startswith("token/") and m in ("GET", "DELETE"):
            st.require_management(tok, "read" if m == "GET" else "write")
            st.purge()
            accessor = rest[len("token/"):]
            t = st.tokens.get(accessor)
            if t is None:
                if m == "DELETE":
                    raise HTTPError(404, "Cannot find token to delete")
                raise HTTPError(404, "Requested token does not exist: ACL not found")
            if m == "DELETE":
                del st.tokens[accessor]
                return 200, True
            return 200, public(t)
        if rest in ("auth-method",) or rest.startswith("auth-method/"):
            return self.auth_method(st, m, rest[len("auth-method/"):] if "/" in rest else "", tok)
        if rest == "binding-rule" and m == "PUT":
            st.require_management(tok, "write")
            return 200, self.binding_rule(st, self.body())
        if rest.startswith("binding-rule/") and m == "DELETE":
            st.require_management(tok, "write")
            if st.rules.pop(rest[len("binding-rule/"):], None) is None:
                raise HTTPError(404, "Cannot find binding rule to delete")
            return 200, True
        if rest in ("policy", "role") and m == "PUT":
            st.require_management(tok, "write")
            b = self.body()
            if not b.get("Name"):
                raise HTTPError(400, "Invalid %s: no name is set" % rest.capitalize())
            obj = {"ID": str(uuid.uuid4()), "Name": b["Name"], "Description": b.get("Description", ""), "CreateIndex": st.next_index()}
            if rest == "policy":
                obj["Rules"] = b.get("Rules", "")
                st.policies[obj["ID"]] = obj
            else:
                obj["Policies"] = b.get("Policies") or []
                st.roles[obj["ID"]] = obj
            obj["ModifyIndex"] = obj["CreateIndex"]
            return 200, obj
        raise HTTPError(404, "Invalid URL path: not a recognized HTTP API endpoint")

    def auth_method(self, st, m, name, tok):
        if m == "GET":
            st.require_management(tok, "read")
            meth = st.methods.get(name)
            if meth is None:
                raise HTTPError(404, "Requested auth method does not exist: ACL not found")
            return 200, public(meth)
        if m == "DELETE":
            st.require_management(tok, "write")
            if st.methods.pop(name, None) is None:
                raise HTTPError(404, "Cannot find auth method to delete")
            # As Consul: its binding rules and the tokens it made go with it.
            for rid in [r for r, rule in st.rules.items() if rule["AuthMethod"] == name]:
                del st.rules[rid]
            for a in [a for a, t in st.tokens.items() if t.get("AuthMethod") == name]:
                del st.tokens[a]
            st.jwks_cache.clear()
            return 200, True
        if m != "PUT":
            raise HTTPError(405, "method %s not allowed" % m)
        st.require_management(tok, "write")
        b = self.body()
        if name and b.get("Name") and b["Name"] != name:
            raise HTTPError(400, "Auth Method name in URL and payload do not match")
        b["Name"] = b.get("Name") or name
        if not re.fullmatch(r"[A-Za-z0-9\-_]{1,128}", b["Name"] or ""):
            raise HTTPError(400, "Invalid Auth Method: invalid Name. Only alphanumeric characters, '-' and '_' are allowed")
        if b.get("Type") != "jwt":
            raise HTTPError(400, "Invalid Auth Method: Type should be one of: jwt (the stand-in implements only jwt)")
        cfg = b.get("Config") or {}
        sources = [k for k in ("JWKSURL", "JWTValidationPubKeys", "OIDCDiscoveryURL") if cfg.get(k)]
        if len(sources) != 1:
            raise HTTPError(400, "Invalid Auth Method: exactly one of 'JWKSURL', 'JWTValidationPubKeys', or 'OIDCDiscoveryURL' must be set for type \"jwt\"")
        if sources[0] == "OIDCDiscoveryURL":
            raise HTTPError(400, "Invalid Auth Method: the stand-in does not implement OIDCDiscoveryURL")
        for field in ("ClockSkewLeeway", "ExpirationLeeway", "NotBeforeLeeway"):
            go_duration(cfg.get(field), field)
        ttl = go_duration(b.get("MaxTokenTTL"), "MaxTokenTTL")
        if b.get("TokenLocality") not in (None, "", "local", "global"):
            raise HTTPError(400, "Invalid Auth Method: TokenLocality should be one of 'local' or 'global'")
        existing = st.methods.get(b["Name"])
        b["CreateIndex"] = existing["CreateIndex"] if existing else st.next_index()
        b["ModifyIndex"] = st.next_index()
        b["_ttl"] = ttl
        st.methods[b["Name"]] = b
        st.jwks_cache.clear()
        return 200, public(b)

    def binding_rule(self, st, b):
        if b.get("AuthMethod") not in st.methods:
            raise HTTPError(400, "Invalid Binding Rule: unknown AuthMethod %s" % json.dumps(b.get("AuthMethod")))
        if b.get("BindType") not in ("service", "node", "role", "policy"):
            raise HTTPError(400, "Invalid Binding Rule: unknown BindType %s" % json.dumps(b.get("BindType")))
        if not b.get("BindName"):
            raise HTTPError(400, "Invalid Binding Rule: no BindName is set")
        if b.get("Selector"):
            try:
                Selector(b["Selector"])
            except ValueError as e:
                raise HTTPError(400, "invalid Binding Rule: Selector is invalid: %s" % e)
        rule = {
            "ID": str(uuid.uuid4()),
            "Description": b.get("Description", ""),
            "AuthMethod": b["AuthMethod"],
            "Selector": b.get("Selector", ""),
            "BindType": b["BindType"],
            "BindName": b["BindName"],
            "CreateIndex": st.next_index(),
        }
        rule["ModifyIndex"] = rule["CreateIndex"]
        st.rules[rule["ID"]] = rule
        return rule


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--listen", default="127.0.0.1:0")
    p.add_argument("--bootstrap-token", default=None, help="the management token's SecretID (default: a new UUID, printed on the second line)")
    p.add_argument("--datacenter", default="dc1")
    p.add_argument("--acl-disabled", action="store_true", help="answer every ACL call 401 \"ACL support disabled\"")
    a = p.parse_args()
    host, _, port = a.listen.rpartition(":")
    srv = ThreadingHTTPServer((host.strip("[]"), int(port)), Handler)
    srv.daemon_threads = True
    srv.state = State(a.bootstrap_token, a.datacenter, a.acl_disabled)
    h, prt = srv.server_address[:2]
    print("listening on http://%s:%d" % (h, prt), flush=True)
    if not a.bootstrap_token:
        print("bootstrap token %s" % srv.state.management_secret, flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
