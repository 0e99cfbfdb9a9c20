#!/usr/bin/env bash
# Load test of `wid serve` beside nginx (issue 29), on loopback, bounded in
# time: the JWKS route of `wid serve` (release build) and nginx serving the
# very same bytes as a static file (`wid keyring export`), plain HTTP and
# TLS, measured with wrk in alternating rounds; then new TLS connections, one
# request each (full handshakes with wrk, new and resumed ones with openssl
# s_time, TLS 1.3 and 1.2: issue 56); then 1,000 slow clients held open
# against `wid serve` while a normal client keeps asking, its slowest answer
# recorded. Prints a table; BENCHMARKS.md keeps the results.
#
#   scripts/serve-load.sh                 # 2 rounds of 8 s per target
#   ROUNDS=3 DURATION=10s scripts/serve-load.sh
#
# Installs wrk, nginx, openssl and curl from Debian when missing (root).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=lib.sh
source scripts/lib.sh

ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-8s}
THREADS=${THREADS:-2}
CONNS=${CONNS:-32}
SLOW=${SLOW:-1000}

for tool in wrk nginx openssl curl; do
    command -v "$tool" >/dev/null 2>&1 || wid_apt_install "$tool"
done
cargo build --release --locked --quiet -p wid
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
wid="$target_dir/release/wid"

work=$(mktemp -d)
# nginx's workers run as an unprivileged user: they must reach the files.
chmod 755 "$work"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT


# Three keys (EdDSA, ES256, RS256): an 804-byte JWKS.
"$wid" keyring init --keystore "$work/keystore" --alg EdDSA --alg ES256 --alg RS256 >/dev/null
"$wid" keyring export --keystore "$work/keystore" --dir "$work/site" >/dev/null
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -keyout "$work/tls.key" -out "$work/tls.pem" -subj /CN=127.0.0.1 \
    -addext subjectAltName=IP:127.0.0.1 2>/dev/null
chmod 600 "$work/tls.key"

nginx_plain=$(wid_free_port)
nginx_tls=$(wid_free_port)
mkdir -p "$work/nginx/logs"
cat >"$work/nginx/nginx.conf" <<CONF
worker_processes auto;
pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log;
events { worker_connections 4096; }
http {
    access_log off;
    types { application/json json; }
    default_type application/json;
    server {
        listen 127.0.0.1:$nginx_plain;
        root $work/site;
    }
    server {
        listen 127.0.0.1:$nginx_tls ssl;
        ssl_certificate $work/tls.pem;
        ssl_certificate_key $work/tls.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        root $work/site;
    }
}
CONF
nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" -g 'daemon off;' &
pids+=($!)

start_wid() { # ADDR [FLAGS...] -> prints the address
    local out="$work/wid-$RANDOM.out"
    "$wid" serve --keystore "$work/keystore" --listen "$@" >"$out" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do
        if grep -q '^listening on' "$out"; then
            sed -n 's/^listening on https\{0,1\}:\/\///p' "$out" | head -1
            return
        fi
        sleep 0.1
    done
    echo "wid serve did not start: $(cat "$out")" >&2
    exit 1
}
wid_plain=$(start_wid 127.0.0.1:0)
wid_tls=$(start_wid 127.0.0.1:0 --tls-cert "$work/tls.pem" --tls-key "$work/tls.key")

path=/.well-known/jwks.json
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$nginx_plain$path" >/dev/null && break
    sleep 0.1
done
# The same bytes from all four.
curl -sf "http://127.0.0.1:$nginx_plain$path" >"$work/a"
curl -sfk "https://127.0.0.1:$nginx_tls$path" >"$work/b"
curl -sf "http://$wid_plain$path" >"$work/c"
curl -sfk "https://$wid_tls$path" >"$work/d"
for f in b c d; do cmp -s "$work/a" "$work/$f" || { echo "serve-load: $f differs from nginx's file" >&2; exit 1; }; done
echo "serve-load: JWKS of $(wc -c <"$work/a") bytes; wrk -t$THREADS -c$CONNS -d$DURATION --latency, $ROUNDS alternating rounds"

measure() { # NAME URL
    local out
    out=$(wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency "$2")
    local rps p99
    rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
    printf '%-16s %12s req/s   p99 %s\n' "$1" "$rps" "$p99"
    echo "$1 $rps" >>"$work/results"
}
for round in $(seq "$ROUNDS"); do
    echo "round $round"
    measure "nginx http" "http://127.0.0.1:$nginx_plain$path"
    measure "wid serve http" "http://$wid_plain$path"
    measure "nginx https" "https://127.0.0.1:$nginx_tls$path"
    measure "wid serve https" "https://$wid_tls$path"
done
python3 - "$work/results" <<'PY'
import sys, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, rps = line.rsplit(" ", 1)
    runs[name].append(float(rps))
for scheme in ("http", "https"):
    n, w = runs[f"nginx {scheme}"], runs[f"wid serve {scheme}"]
    ratios = [b / a for a, b in zip(n, w)]
    print(f"{scheme}: wid serve / nginx per round: " + ", ".join(f"{r:.2f}" for r in ratios))
PY

# New TLS connections (issue 56): relying parties fetch the JWKS on a new
# connection, so the handshake is the cost. One request per connection: wrk
# with `Connection: close` (each request a full TLS 1.3 handshake, the
# server closing after its answer), then one `openssl s_time` client timing
# new and resumed handshakes (TLS 1.3: a PSK from the server's ticket; TLS
# 1.2: the session ID or ticket), each the connections it made over the
# wall time it ran. Alternating rounds, nginx first.
handshakes() { # NAME URL
    local out rate
    out=$(wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" -H "Connection: close" "$2")
    rate=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
    printf '%-34s %10s handshakes/s\n' "$1" "$rate"
    echo "$1|$rate" >>"$work/handshakes"
}
one_client() { # NAME HOST:PORT -new|-reuse -tls1_3|-tls1_2
    local out from to n rate resumed
    from=$EPOCHREALTIME
    out=$(openssl s_time -connect "$2" -www "$path" "$3" "$4" -time "${DURATION%s}" 2>&1 </dev/null)
    to=$EPOCHREALTIME
    n=$(awk '/connections in [0-9.]+s;/ {n = $1} END {print n + 0}' <<<"$out")
    if [ "$n" -eq 0 ]; then
        echo "serve-load: openssl s_time $3 $4 against $1 made no connection: $out" >&2
        exit 1
    fi
    rate=$(awk -v n="$n" -v a="$from" -v b="$to" 'BEGIN {printf "%.0f", n / (b - a)}')
    # s_time marks each connection: `r` resumed, `*` (or a version) not.
    resumed=$(tr -cd r <<<"$(sed -n '/^[*rt3]*$/p' <<<"$out")" | wc -c | tr -d ' ')
    if [ "$3" = -reuse ] && [ $((resumed * 10)) -lt $((n * 9)) ]; then
        echo "serve-load: $1 resumed $resumed of $n connections (expected nearly all): $out" >&2
        exit 1
    fi
    printf '%-34s %10s handshakes/s (one client; %s of %s resumed)\n' "$1" "$rate" "$resumed" "$n"
    echo "$1|$rate" >>"$work/handshakes"
}
for round in $(seq "$ROUNDS"); do
    echo "handshakes, round $round"
    handshakes "nginx new (wrk)" "https://127.0.0.1:$nginx_tls$path"
    handshakes "wid serve new (wrk)" "https://$wid_tls$path"
    for v in -tls1_3 -tls1_2; do
        for mode in -new -reuse; do
            one_client "nginx $mode $v" "127.0.0.1:$nginx_tls" "$mode" "$v"
            one_client "wid serve $mode $v" "$wid_tls" "$mode" "$v"
        done
    done
done
python3 - "$work/handshakes" <<'PY'
import sys, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, rate = line.rstrip("\n").split("|")
    runs[name].append(float(rate))
for name in [n for n in runs if n.startswith("nginx ")]:
    n, w = runs[name], runs["wid serve " + name[len("nginx "):]]
    ratios = ", ".join(f"{b / a:.2f}" for a, b in zip(n, w))
    print(f"handshakes {name[len('nginx '):]}: wid serve / nginx per round: {ratios}")
PY

# 1,000 slow clients (each sends part of a request head, then a byte now
# and then) held open against wid serve while a normal client asks 50
# times; the slowest of its answers.
python3 - "$wid_plain" "$SLOW" <<'PY'
import socket, sys, time, urllib.request
host, port = sys.argv[1].rsplit(":", 1)
n = int(sys.argv[2])
slow = []
for i in range(n):
    s = socket.create_connection((host, int(port)))
    s.sendall(b"GET /.well-known/jwks.json HTTP/1.1\r\nHo")
    slow.append(s)
worst = 0.0
for i in range(50):
    if i % 10 == 0:
        for s in slow:
            try:
                s.sendall(b"s")
            except OSError:
                pass
    t = time.monotonic()
    with urllib.request.urlopen(f"http://{host}:{port}/.well-known/jwks.json", timeout=30) as r:
        assert r.status == 200
        r.read()
    worst = max(worst, time.monotonic() - t)
    time.sleep(0.02)
print(f"{n} slow clients held open: a normal client's slowest of 50 answers took {worst*1000:.1f} ms")
PY
