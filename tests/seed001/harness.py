#!/usr/bin/env python3
"""Seed 001 for real: a Go host on the binding, killed and restored, against
a real OpenBao (VaultLogin) and a real Consul (ConsulLogin).

Seed 001 is a scheduler's client that restored its allocations after a
restart and never logged in to Consul again: the sidecars ran with the
anonymous token. Here the host (tests/seed001/host, built on
bindings/go/wid's IdentityManager) runs in its own OS process with two
identities of one allocation (tasks "server" and "worker", identity
"vault_default"), each with its own login. It starts, logs in and uses its
secrets; it is killed with SIGKILL at varied points; a new process restores
from the state directory. Each round is killed at one of:

  steady      after both secrets were delivered and used, a moment later
  sign        inside the signer, after signing and before anything is saved
              (the host kills itself: -kill-at-sign)
  login       the server made the token, the host never got the answer
              (the proxy below holds the answer and kills the host)
  renew       during a renewal (Vault renew-self) or a token check (Consul
              token/self) the same way
  check       during the restore's confirmation of a saved secret
  logout      while a replaced secret is revoked (after its successor was
              delivered)

A point a round does not reach within its time (a restore that needs no
login, say) ends that round with a steady kill instead, and says so.

Checked, from what the host reports (one line per delivery, written before
anything else is done with it) and what the server holds:
  * every secret delivered was non-empty and worked when used (the host reads
    the Vault KV secret with it, or asks Consul's token/self);
  * no secret was ever delivered to two identities;
  * afterwards the server holds at most one live token per identity from the
    host (Vault: LIST auth/token/accessors; Consul: the auth method's tokens),
    counted after the tokens that kills orphaned could have expired. A kill
    after the server made a token and before the host saved it orphans that
    token: nothing can revoke a token it never received, so tokens are short
    lived (the role's token_ttl, the auth method's MaxTokenTTL) and the count
    waits them out while the live host keeps its own renewed.

The C program bindings/c/logins.c (docs/vault.md, docs/consul.md) is run
against the same servers first: start, then restore (the saved secret
confirmed, the same one).

Then, against OpenBao with tokens that live 600 s (so nothing is waited
out): a restore that logs in again is killed before the old tokens'
revocation reaches the server; the next start must revoke them at once
(one live token per identity, none of the old ones); and a host run with
-end (IdentityManager.EndAllocation, never started) must leave no live
token of the allocation and no state file.

Usage: harness.py --host BIN --clogins BIN --bao BIN --consul BIN [--rounds N] [--only vault|consul]
"""

import argparse
import base64
import hashlib
import http.client
import http.server
import json
import os
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

IDENTITIES = ["server/vault_default", "worker/vault_default"]
ROOT = "seed001-root"
# In an order where each round's kill leaves the state the next point needs:
# a steady kill leaves fresh saved identities (so the restore checks the
# saved secrets), a kill during a renewal leaves a secret derived from an
# older token (so the restore replaces it and revokes the old one).
POINTS = ["steady", "check", "sign", "login", "renew", "logout"]


def log(msg):
    print(f"seed001: {msg}", flush=True)


def fail(msg):
    print(f"seed001: FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(method, url, body=None, headers=None, timeout=10):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, (json.loads(raw) if raw.strip() else None)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode(errors="replace")


def wait_until(what, check, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    fail(f"timed out waiting for {what}")


def jwks_to_pem(jwks_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    key = json.load(open(jwks_path))["keys"][0]
    x = base64.urlsafe_b64decode(key["x"] + "=" * (-len(key["x"]) % 4))
    return Ed25519PublicKey.from_public_bytes(x).public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


class Proxy:
    """An HTTP proxy in front of the server that can kill the host in the
    middle of a call: it forwards the request, reads the server's whole
    answer (so the server has done the work), then, if the call is the one
    this round kills at, kills the host and drops the answer."""

    def __init__(self, upstream_port, paths):
        self.upstream_port = upstream_port
        self.paths = paths  # point name -> (path prefixes, calls let through first[, "before"])
        self.point = None
        self.victim = None
        self.killed_at = None
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if proxy.should_kill(self.path, before=True):
                    # Killed before the call reached the server.
                    self.close_connection = True
                    return
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                if proxy.should_kill(self.path, before=False):
                    self.close_connection = True
                    return
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def arm(self, point, victim):
        with self.lock:
            self.point, self.victim, self.killed_at, self.seen = point, victim, None, 0

    def should_kill(self, path, before):
        with self.lock:
            if self.victim is None or self.point not in self.paths:
                return False
            prefixes, skip, *when = self.paths[self.point]
            # A point kills after the server answered, unless it says
            # "before" (the call never reaches the server).
            if (when == ["before"]) != before:
                return False
            if not any(path.startswith(p) for p in prefixes):
                return False
            self.seen += 1
            if self.seen <= skip:
                return False
            self.victim.send_signal(signal.SIGKILL)
            self.killed_at = path
            self.victim = None
            return True

    def close(self):
        self.server.shutdown()


class Host:
    """One OS process of the Go host; its report lines are read as they come."""

    running = []  # every host started, killed at exit whatever happens

    def __init__(self, cmd):
        self.lines = queue.Queue()
        self.all = []
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        Host.running.append(self.proc)
        threading.Thread(target=self._read, args=(self.proc.stdout, ""), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, "stderr: "), daemon=True).start()

    def _read(self, stream, prefix):
        for line in stream:
            line = prefix + line.rstrip("\n")
            self.all.append(line)
            self.lines.put(line)

    def wait_line(self, pred, timeout):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                line = self.lines.get(timeout=min(left, 0.2))
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    return None
                continue
            if pred(line):
                return line

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        time.sleep(0.1)  # let the readers drain


class Vault:
    name = "vault"

    def __init__(self, bao, work):
        self.port = free_port()
        self.addr = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(work, "bao.log"), "w")
        self.proc = subprocess.Popen(
            [bao, "server", "-dev", f"-dev-root-token-id={ROOT}", f"-dev-listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        wait_until("OpenBao", lambda: http_json("GET", f"{self.addr}/v1/sys/health")[0] == 200)
        self.token_ttl = 15
        self.long_role = "seed-long"

    def api(self, method, path, body=None):
        return http_json(method, f"{self.addr}/v1/{path}", body, {"X-Vault-Token": ROOT})

    def configure(self, pem):
        for method, path, body in [
            ("POST", "sys/auth/jwt", {"type": "jwt"}),
            ("POST", "auth/jwt/config", {"jwt_validation_pubkeys": [pem]}),
            ("PUT", "sys/policies/acl/seed", {"policy": 'path "secret/data/seed" { capabilities = ["read"] }'}),
            ("POST", "auth/jwt/role/seed", {
                "role_type": "jwt", "bound_audiences": ["vault.io"], "user_claim": "sub",
                "claim_mappings": {"nomad_task": "task"}, "token_policies": ["seed"],
                "token_ttl": f"{self.token_ttl}s", "token_max_ttl": "45s",
            }),
            # Tokens that outlive any wait: a revocation that is lost shows.
            ("POST", f"auth/jwt/role/{self.long_role}", {
                "role_type": "jwt", "bound_audiences": ["vault.io"], "user_claim": "sub",
                "claim_mappings": {"nomad_task": "task"}, "token_policies": ["seed"],
                "token_ttl": "600s", "token_max_ttl": "1200s",
            }),
            ("POST", "secret/data/seed", {"data": {"value": "the allocation's secret"}}),
        ]:
            status, answer = self.api(method, path, body)
            if status >= 300:
                fail(f"OpenBao {method} {path}: {status} {answer}")

    def login_name(self):
        return "seed"

    def proxy_paths(self):
        return {
            "login": (["/v1/auth/jwt/login"], 0),
            "renew": (["/v1/auth/token/renew-self"], 0),
            "check": (["/v1/auth/token/lookup-self"], 0),
            "logout": (["/v1/auth/token/revoke-self"], 0),
            # A revocation that never reaches the server.
            "before-logout": (["/v1/auth/token/revoke-self"], 0, "before"),
        }

    def live_tokens(self, role=None):
        """Live tokens from the JWT login, per task (of one role, if given)."""
        status, answer = self.api("LIST", "auth/token/accessors")
        if status != 200:
            fail(f"OpenBao LIST auth/token/accessors: {status} {answer}")
        per = {}
        for accessor in answer["data"]["keys"]:
            status, t = self.api("POST", "auth/token/lookup-accessor", {"accessor": accessor})
            if status != 200:
                continue  # revoked or expired meanwhile
            d = t["data"]
            if d.get("path") != "auth/jwt/login" or d.get("ttl", 0) <= 0:
                continue
            meta = d.get("meta") or {}
            if role is not None and meta.get("role") != role:
                continue
            task = meta.get("task", "?")
            per.setdefault(f"{task}/vault_default", []).append(accessor)
        return per

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class Consul:
    """A real Consul agent (`consul agent -dev`, ACLs on) on loopback ports
    of its own."""

    name = "consul"

    def __init__(self, consul, work):
        self.mgmt = "5e1f7c3a-0b2d-4c6e-8f9a-1b3c5d7e9f00"
        self.log = open(os.path.join(work, "consul.log"), "w")
        http_port = free_port()
        acl = ('acl {\n  enabled = true\n  default_policy = "deny"\n'
               f'  tokens {{\n    initial_management = "{self.mgmt}"\n  }}\n}}\n')
        self.proc = subprocess.Popen(
            [consul, "agent", "-dev", "-bind", "127.0.0.1", "-client", "127.0.0.1",
             "-dns-port", "-1", "-grpc-port", "-1", "-grpc-tls-port", "-1",
             "-http-port", str(http_port), "-serf-lan-port", str(free_port()),
             "-serf-wan-port", str(free_port()), "-server-port", str(free_port()),
             "-hcl", acl],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        self.addr = f"http://127.0.0.1:{http_port}"
        self.port = http_port
        # The least MaxTokenTTL Consul takes (ACLTokenMinExpirationTTL).
        self.token_ttl = 60
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                fail(f"consul exited ({self.proc.returncode}): see {self.log.name}")
            try:
                status, _ = self.api("GET", "acl/token/self")
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                fail(f"consul was not up within 120 s: see {self.log.name}")
            time.sleep(0.1)

    def api(self, method, path, body=None):
        return http_json(method, f"{self.addr}/v1/{path}", body, {"X-Consul-Token": self.mgmt})

    def configure(self, pem):
        for method, path, body in [
            ("PUT", "acl/auth-method", {
                "Name": "nomad-workloads", "Type": "jwt", "MaxTokenTTL": f"{self.token_ttl}s",
                "TokenLocality": "local",
                "Config": {
                    "JWTValidationPubKeys": [pem], "BoundAudiences": ["consul.io"],
                    "ClaimMappings": {"nomad_task": "nomad_task", "nomad_namespace": "nomad_namespace"},
                },
            }),
            ("PUT", "acl/binding-rule", {
                "AuthMethod": "nomad-workloads", "BindType": "service",
                "BindName": "${value.nomad_task}", "Selector": 'value.nomad_task != ""',
            }),
        ]:
            status, answer = self.api(method, path, body)
            if status >= 300:
                fail(f"Consul {method} {path}: {status} {answer}")

    def login_name(self):
        return "nomad-workloads"

    def proxy_paths(self):
        # Consul tokens are not renewed: a new login replaces one when the
        # identity is re-signed or the token's end nears, after the logins of
        # the start or restore (one per identity).
        return {
            "login": (["/v1/acl/login"], 0),
            "renew": (["/v1/acl/login"], len(IDENTITIES)),
            "check": (["/v1/acl/token/self"], 0),
            "logout": (["/v1/acl/logout"], 0),
        }

    def live_tokens(self):
        status, answer = self.api("GET", "acl/tokens?authmethod=nomad-workloads")
        if status != 200:
            fail(f"Consul GET acl/tokens: {status} {answer}")
        per = {}
        for t in answer:
            names = [s["ServiceName"] for s in t.get("ServiceIdentities") or []]
            key = f"{names[0] if names else '?'}/vault_default"
            per.setdefault(key, []).append(t["AccessorID"])
        return per

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def run_c_program(clogins, server, addr, keystore, work):
    """docs/vault.md's and docs/consul.md's C: start, then restore confirms
    the same secret."""
    state = tempfile.mkdtemp(prefix=f"c-{server.name}-", dir=work)
    outs = []
    for step in ["start", "restore"]:
        r = subprocess.run(
            [clogins, server.name, step, addr, server.login_name(), keystore, state],
            capture_output=True, text=True, timeout=60,
        )
        if r.returncode != 0:
            fail(f"logins.c {server.name} {step}: exit {r.returncode}: {r.stderr.strip()}")
        outs.append(r.stdout.split())
    (_, fp1, kind1), (_, fp2, kind2) = outs
    if (kind1, kind2) != ("initial", "restored") or fp1 != fp2:
        fail(f"logins.c {server.name}: expected the same secret restored, got {outs}")
    log(f"{server.name}: C (bindings/c/logins.c): started, restarted, the saved secret confirmed and reused")


def loop(args, server, keystore, work):
    proxy = Proxy(server.port, server.proxy_paths())
    addr = f"http://127.0.0.1:{proxy.port}"
    state = tempfile.mkdtemp(prefix=f"go-{server.name}-", dir=work)
    owner = {}  # secret fingerprint -> identity
    delivered = 0
    rng = random.Random(1)
    reached = {p: 0 for p in POINTS}

    def host_cmd(extra=()):
        return [args.host, "-mode", server.name, "-addr", addr, "-use-addr", server.addr,
                "-name", server.login_name(),
                "-keystore", keystore, "-state", state, *extra]

    def record(host):
        nonlocal delivered
        for line in host.all:
            if line.startswith("FAIL"):
                fail(f"{server.name}: the host reported: {line}")
            if not line.startswith("deliver "):
                continue
            _, identity, fp, kind, used = line.split()
            if fp == "empty":
                fail(f"{server.name}: an empty secret was delivered to {identity}")
            if used != "used=ok":
                fail(f"{server.name}: a secret delivered to {identity} ({kind}) did not work: {used}")
            if owner.setdefault(fp, identity) != identity:
                fail(f"{server.name}: one secret was delivered to {owner[fp]} and {identity}")
            delivered += 1

    missed = []  # points a round did not reach, tried again first
    # A point a round did not reach (its timing depends on how fast the
    # host starts) is tried again in a later steady round, and after the
    # rounds asked for, in up to 12 more (alternately steady, which leaves
    # fresh saved identities, and the point): coverage, not speed, decides.
    n = 0
    while n < args.rounds or (missed and n < args.rounds + 12):
        point = POINTS[n % len(POINTS)]
        if n >= args.rounds:
            point = "steady" if n % 2 == args.rounds % 2 else missed[0]
            if point != "steady":
                missed.pop(0)
        elif point == "steady" and missed:
            point = missed.pop(0)
        extra = ["-kill-at-sign", "1"] if point == "sign" else []
        host = Host(host_cmd(extra))
        proxy.arm(point, host.proc)
        how = point
        if point == "steady":
            if host.wait_line(lambda l: l == "ready", 30) is None:
                fail(f"{server.name}: round {n}: the host never got ready: {host.all[-10:]}")
            time.sleep(rng.uniform(0, 1))
            host.kill()
        else:
            # The point may come with a renewal (identities live 12 s,
            # renewed half-way): wait up to 16 s for it.
            deadline = time.monotonic() + 16
            while host.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if host.proc.poll() is None:
                how = f"{point} not reached; steady (tried again later)"
                proxy.arm(None, None)
                host.kill()
                missed.append(point)
            else:
                reached[point] += 1
        host.kill()
        record(host)
        log(f"{server.name}: round {n + 1}/{args.rounds}: killed at {how}"
            + (f" ({proxy.killed_at})" if proxy.killed_at else ""))
        n += 1

    # The last process lives: it restores, keeps its secrets renewed, and the
    # tokens the kills orphaned run out meanwhile.
    proxy.arm(None, None)
    host = Host(host_cmd())
    if host.wait_line(lambda l: l == "ready", 30) is None:
        fail(f"{server.name}: the last host never got ready: {host.all[-10:]}")
    wait = server.token_ttl + 10
    log(f"{server.name}: the last host is ready; waiting {wait} s for orphaned tokens to expire")
    time.sleep(wait)
    if host.proc.poll() is not None:
        fail(f"{server.name}: the last host died: {host.all[-10:]}")
    # Counted with the host paused (SIGUSR1: it finishes the tick under way
    # and stops ticking), so no login is between delivering a new token and
    # revoking the one it replaces.
    host.proc.send_signal(signal.SIGUSR1)
    if host.wait_line(lambda l: l == "paused", 30) is None:
        fail(f"{server.name}: the last host did not pause: {host.all[-10:]}")
    live = server.live_tokens()
    host.kill()
    record(host)
    for identity in IDENTITIES:
        n_live = len(live.get(identity, []))
        if n_live != 1:
            fail(f"{server.name}: {n_live} live tokens for {identity} (expected exactly one): {live}")
    unknown = set(live) - set(IDENTITIES)
    if unknown:
        fail(f"{server.name}: live tokens of no identity: {sorted(unknown)}")
    missed = [p for p in POINTS if p != "steady" and reached[p] == 0]
    if missed:
        fail(f"{server.name}: no round was killed at {missed}: the loop did not test them")
    proxy.close()
    log(f"{server.name}: OK: {n} kills ({', '.join(f'{p} {reached[p]}' for p in POINTS if p != 'steady')}), "
        f"{delivered} deliveries, each non-empty and working, none to two identities; "
        f"afterwards one live token per identity")


def pending_revocation(args, server, keystore, work):
    """A kill between a restore's new login and the old token's revocation
    (issue 51 item 5), with tokens that live 600 s, so that a revocation
    that is lost shows: the next start revokes the old tokens at once. Then
    the allocation ends while the host is down: a host run with -end
    revokes every saved token and removes the state file."""
    proxy = Proxy(server.port, server.proxy_paths())
    addr = f"http://127.0.0.1:{proxy.port}"
    state = tempfile.mkdtemp(prefix="go-pending-", dir=work)
    role = server.long_role

    def cmd(*extra):
        return [args.host, "-mode", server.name, "-addr", addr, "-use-addr", server.addr,
                "-name", role, "-keystore", keystore, "-state", state, *extra]

    def check_deliveries(host):
        for line in host.all:
            if line.startswith("FAIL") or (line.startswith("deliver ") and not line.endswith("used=ok")):
                fail(f"pending revocation: the host reported: {line}")

    def live():
        per = server.live_tokens(role)
        return {i: sorted(per.get(i, [])) for i in IDENTITIES}, sorted(set(per) - set(IDENTITIES))

    # A host starts and logs in (tokens A), then is killed.
    host = Host(cmd())
    if host.wait_line(lambda l: l == "ready", 30) is None:
        fail(f"pending revocation: the first host never got ready: {host.all[-10:]}")
    host.kill()
    check_deliveries(host)
    first, other = live()
    if any(len(a) != 1 for a in first.values()) or other:
        fail(f"pending revocation: after the start, expected one live token per identity: {first} {other}")
    # Its identities live 12 s and are due from 6 s: after 7 s down, the
    # restore re-signs them and logs in again (tokens B). Killed when the
    # first revocation of an A token leaves the host, before it reaches
    # OpenBao.
    time.sleep(7)
    host = Host(cmd())
    proxy.arm("before-logout", host.proc)
    deadline = time.monotonic() + 30
    while host.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if proxy.killed_at is None:
        fail(f"pending revocation: the restore revoked nothing within 30 s: {host.all[-10:]}")
    host.kill()
    check_deliveries(host)
    both, _ = live()
    for identity in IDENTITIES:
        if first[identity][0] not in both[identity] or len(both[identity]) != 2:
            fail(f"pending revocation: after the kill, expected {identity}'s old token still live beside "
                 f"its new one (the revocation never reached OpenBao): {both}")
    log(f"{server.name}: pending revocation: killed before the old tokens' revocation reached OpenBao "
        f"({proxy.killed_at}); old and new tokens live (600 s TTL)")
    # The next start restores and finishes the revocation at once: no
    # waiting out any TTL.
    proxy.arm(None, None)
    host = Host(cmd())
    if host.wait_line(lambda l: l == "ready", 30) is None:
        fail(f"pending revocation: the next host never got ready: {host.all[-10:]}")
    # Ready comes after Restore returned, and its revocations with it;
    # paused so that no renewal is between a login and a revocation.
    host.proc.send_signal(signal.SIGUSR1)
    if host.wait_line(lambda l: l == "paused", 30) is None:
        fail(f"pending revocation: the next host did not pause: {host.all[-10:]}")
    after, other = live()
    host.kill()
    check_deliveries(host)
    for identity in IDENTITIES:
        if len(after[identity]) != 1 or first[identity][0] in after[identity]:
            fail(f"pending revocation: after the next start, expected only {identity}'s new token live "
                 f"(old {first[identity]}): {after}")
    if other:
        fail(f"pending revocation: live tokens of no identity: {other}")
    log(f"{server.name}: pending revocation: the next start revoked the old tokens; one live token per identity")
    # The allocation ends while the host is down: -end revokes what the
    # state directory holds and removes its file.
    r = subprocess.run(cmd("-end"), capture_output=True, text=True, timeout=60)
    if r.returncode != 0 or r.stdout.strip() != "ended":
        fail(f"pending revocation: the host's -end: exit {r.returncode}: {r.stdout.strip()} {r.stderr.strip()[-500:]}")
    ended, other = live()
    if any(ended.values()) or other:
        fail(f"pending revocation: after EndAllocation, live tokens remain: {ended} {other}")
    left = os.listdir(state)
    if left:
        fail(f"pending revocation: after EndAllocation, the state directory still holds {left}")
    proxy.close()
    log(f"{server.name}: EndAllocation: every token of the allocation revoked, its state file removed")


def main():
    # A timeout's SIGTERM (scripts/seed001.sh) ends the run through the
    # finally below, so no server or host outlives it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("seed001: FAIL: terminated (timeout?)"))
    p = argparse.ArgumentParser()
    p.add_argument("--host", required=True)
    p.add_argument("--clogins", required=True)
    p.add_argument("--bao", default=shutil.which("bao"))
    p.add_argument("--consul", required=True)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--only", choices=["vault", "consul"])
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="wid-seed001-")
    keystore = os.path.join(work, "keystore.json")
    jwks = os.path.join(work, "jwks.json")
    subprocess.run([args.clogins, "keys", keystore, jwks], check=True)
    pem = jwks_to_pem(jwks)
    servers = []
    try:
        for kind in ["vault", "consul"]:
            if args.only not in (None, kind):
                continue
            server = Vault(args.bao, work) if kind == "vault" else Consul(args.consul, work)
            servers.append(server)
            server.configure(pem)
            run_c_program(args.clogins, server, server.addr, keystore, work)
            loop(args, server, keystore, work)
            if kind == "vault":
                pending_revocation(args, server, keystore, work)
    finally:
        for proc in Host.running:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for s in servers:
            s.close()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
