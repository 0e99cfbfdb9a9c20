#!/usr/bin/env bash
# spire-interop.sh -- the SPIFFE checks against a real SPIRE (v1.15.3, built
# from tests/spire/go.mod by scripts/spire.sh with the default Go caches):
#
#   SPIRE trusts us. `wid serve` serves our bundle over HTTPS (a test CA
#   made here with openssl, trusted by spire-server as a Go program trusts a
#   CA: SSL_CERT_FILE); spire-server federates with it (federates_with,
#   profile https_web) and the agent's workload entry federates with our
#   trust domain. Then SPIRE's own JWT-SVID validator, `spire-agent api
#   validate jwt` over the agent's Workload API, must accept our ES256 and
#   RS256 JWT-SVIDs and refuse an EdDSA token, a wrong audience and an
#   expired token; after `wid keyring revoke` of the ES256 key, once SPIRE
#   has fetched our bundle again (at our spiffe_refresh_hint), it must
#   refuse that key's token and accept the replacement key's. A go-spiffe
#   v2 workload (bindings/go/interop/cmd/gospiffeworkload) fetching JWT
#   bundles from the agent must see our keys.
#
#   We trust SPIRE. SPIRE's own bundle endpoint (profile https_web, a
#   certificate of the same test CA) is read by SpiffeBundleSource; a trust
#   set verifies the JWT-SVIDs `spire-server jwt mint` makes and follows
#   SPIRE's JWT authority rotation (localauthority jwt prepare, activate,
#   taint, revoke): the new authority's tokens verify without a restart, the
#   revoked one's are refused after the next fetch (examples/spire_trust.rs).
#
#   SPIRE's WIT-SVIDs (experimental): what `spire-server wit mint` makes,
#   and that SPIRE v1.15.3 publishes their key in no SPIFFE bundle.
#
# Every answer SPIRE gives is printed, so the log shows what it said. The
# server and the agent are stopped however the checks end. Reports the
# build and start times.
#
#   scripts/spire-interop.sh
#   WID_BIN=/path/to/wid scripts/spire-interop.sh
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$SCRIPT_DIR/lib.sh"
cd "$WID_ROOT"
wid_go_setup spire-interop.sh

if [ -z "${WID_BIN:-}" ]; then
    cargo build --release --locked --quiet -p wid
    WID_BIN="$(wid_target_dir)/release/wid"
fi
WAIT_SECS=120
OUR_TD="wid.test"
AUD="vault.io"

work="$(mktemp -d "${TMPDIR:-/tmp}/wid-spire.XXXXXX")"
serve_pid=""
cleanup() {
    "$SCRIPT_DIR/spire.sh" stop "$work/spire" >/dev/null 2>&1 || true
    if [ -n "$serve_pid" ]; then kill "$serve_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    echo "spire-interop.sh: FAIL: $*" >&2
    exit 1
}

"$SCRIPT_DIR/spire.sh" build

# --- our side: keys, a TLS certificate, wid serve -----------------------------
ks="$work/keystore"
kek="$work/kek"
"$WID_BIN" keyring generate-kek --kek-file "$kek" >/dev/null
"$WID_BIN" keyring init --keystore "$ks" --kek-file "$kek" --alg ES256 --alg RS256 --alg EdDSA >/dev/null
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=wid-test-ca" -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$work/tls.key" -out "$work/tls.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > "$work/tls.ext"
openssl x509 -req -in "$work/tls.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial \
    -days 2 -extfile "$work/tls.ext" -out "$work/tls.pem" 2>/dev/null
chmod 600 "$work/tls.key"
mkfifo "$work/serve.out"
"$WID_BIN" serve --keystore "$ks" --kek-file "$kek" --listen 127.0.0.1:0 \
    --tls-cert "$work/tls.pem" --tls-key "$work/tls.key" --spiffe-refresh-hint 5s \
    > "$work/serve.out" 2> "$work/serve.log" &
serve_pid=$!
read -r -t "$WAIT_SECS" first < "$work/serve.out" || fail "wid serve named no address: $(cat "$work/serve.log")"
cat "$work/serve.out" > /dev/null &
base="${first#listening on }"
case "$base" in https://127.0.0.1:*) ;; *) fail "wid serve said $first" ;; esac
echo "spire-interop.sh: our bundle at $base/spiffe/bundle.json (trust domain $OUR_TD, refresh hint 5s)"

# --- SPIRE, federating with us -------------------------------------------------
SPIRE_FEDERATE_TD="$OUR_TD" SPIRE_FEDERATE_URL="$base/spiffe/bundle.json" SPIRE_FEDERATE_CA="$work/ca.pem" \
    SPIRE_WIT_SVID=1 SPIRE_ENDPOINT_CERT="$work/tls.pem" SPIRE_ENDPOINT_KEY="$work/tls.key" \
    "$SCRIPT_DIR/spire.sh" start "$work/spire"
# shellcheck source=/dev/null
source "$work/spire/env"
server() { "$SPIRE_BIN/spire-server" "$@" -socketPath "$SPIRE_SERVER_SOCKET"; }
agent() { "$SPIRE_BIN/spire-agent" "$@" -socketPath "$SPIRE_AGENT_SOCKET"; }

# eventually WHAT CMD...: CMD succeeds within WAIT_SECS.
eventually() {
    local what="$1" start
    shift
    start=$(date +%s)
    until "$@" >/dev/null 2>&1; do
        if [ $(( $(date +%s) - start )) -ge "$WAIT_SECS" ]; then
            echo "spire-server log (last lines):" >&2
            tail -n 15 "$work/spire/server/log" >&2 || true
            fail "$what: not within ${WAIT_SECS}s"
        fi
        sleep 1
    done
}

kid_of() { "$WID_BIN" keyring list --keystore "$ks" --kek-file "$kek" --json |
    python3 -c 'import json,sys; print(next(k["kid"] for k in json.load(sys.stdin)["keys"] if k["algorithm"].startswith(sys.argv[1]) and k["state"] == "active"))' "$1"; }
es_kid="$(kid_of ES256)"
rs_kid="$(kid_of RS256)"
has_bundle_with() { server bundle list -id "spiffe://$OUR_TD" -format spiffe 2>/dev/null | grep -q "\"$1\""; }
eventually "spire-server fetched our bundle (ES256 key $es_kid)" has_bundle_with "$es_kid"
echo "spire-interop.sh: spire-server holds our bundle:"
server bundle list -id "spiffe://$OUR_TD" -format spiffe | python3 -c 'import json,sys; b=json.load(sys.stdin); print("  spiffe_sequence", b.get("spiffe_sequence"), "keys", sorted((k["kid"], k.get("use")) for k in b["keys"]))'

# --- our JWT-SVIDs through SPIRE's validator ----------------------------------
cat > "$work/request.json" <<EOF
{"Region": "global",
 "Allocation": {"ID": "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc", "Namespace": "default",
                "JobID": "web", "TaskGroup": "frontend", "ClientStatus": "running"},
 "Task": "server",
 "Identity": {"Name": "default", "Audience": ["$AUD"], "TTL": "10m"}}
EOF
issue() { "$WID_BIN" issue --keystore "$ks" --kek-file "$kek" --request "$work/request.json" "$@" 2>/dev/null; }
# validate NAME EXPECT AUD TOKEN: SPIRE's answer must be EXPECT (accept|refuse).
validate() {
    local name="$1" expect="$2" aud="$3" token="$4" out rc=0
    out="$(agent api validate jwt -audience "$aud" -svid "$token" 2>&1)" || rc=$?
    echo "  spire-agent api validate jwt ($name): exit $rc: $(echo "$out" | tr '\n' ' ' | cut -c1-200)"
    case "$expect" in
        accept) [ "$rc" -eq 0 ] || fail "SPIRE refused our $name" ;;
        refuse) [ "$rc" -ne 0 ] || fail "SPIRE accepted $name" ;;
    esac
}
# The agent holds our bundle once the entry's federated bundle reaches it.
es_token="$(issue --alg ES256 --spiffe-trust-domain "$OUR_TD")"
agent_accepts() { agent api validate jwt -audience "$AUD" -svid "$1"; }
eventually "the agent holds our bundle (an ES256 JWT-SVID validates)" agent_accepts "$es_token"
rs_token="$(issue --alg RS256 --spiffe-trust-domain "$OUR_TD")"
ed_token="$(issue --alg EdDSA)"
old_token="$(issue --alg ES256 --spiffe-trust-domain "$OUR_TD" --now $(( $(date +%s) - 3600 )))"
validate "ES256 JWT-SVID" accept "$AUD" "$es_token"
validate "RS256 JWT-SVID" accept "$AUD" "$rs_token"
validate "EdDSA token" refuse "$AUD" "$ed_token"
validate "ES256 JWT-SVID for another audience" refuse "another.example" "$es_token"
validate "expired ES256 JWT-SVID" refuse "$AUD" "$old_token"

# --- a go-spiffe workload sees our keys through the agent ---------------------
seen="$(cd bindings/go/interop && CGO_ENABLED=0 go run ./cmd/gospiffeworkload \
    "unix://$SPIRE_AGENT_SOCKET" "$OUR_TD")" || fail "go-spiffe could not fetch JWT bundles: $seen"
echo "  go-spiffe workloadapi.FetchJWTBundles: $OUR_TD authorities: $seen"
for kid in "$es_kid" "$rs_kid"; do
    case " $seen " in *" $kid "*) ;; *) fail "go-spiffe did not see $kid in $OUR_TD's bundle" ;; esac
done

# --- revoke: SPIRE follows our bundle -----------------------------------------
"$WID_BIN" keyring revoke --keystore "$ks" --kek-file "$kek" "$es_kid" > "$work/revoke.out"
new_es="$(kid_of ES256)"
[ "$new_es" != "$es_kid" ] || fail "wid keyring revoke left $es_kid active"
lacks_bundle() { ! has_bundle_with "$es_kid" && has_bundle_with "$new_es"; }
eventually "spire-server refetched our bundle without $es_kid" lacks_bundle
agent_refuses() { ! agent api validate jwt -audience "$AUD" -svid "$1"; }
eventually "the agent refuses the revoked key's token" agent_refuses "$es_token"
validate "ES256 JWT-SVID of the revoked key $es_kid" refuse "$AUD" "$es_token"
validate "ES256 JWT-SVID of the replacement key $new_es" accept "$AUD" "$(issue --alg ES256 --spiffe-trust-domain "$OUR_TD")"
validate "RS256 JWT-SVID after the revocation" accept "$AUD" "$rs_token"

# --- we trust SPIRE: its bundle endpoint, its tokens, its rotation ----------
echo "spire-interop.sh: SpiffeBundleSource reads SPIRE's bundle endpoint ($SPIRE_BUNDLE_PROFILE, $SPIRE_BUNDLE_ENDPOINT)"
cargo run --locked --quiet --example spire_trust --features "${WID_TEST_FEATURES:-etcd,fuzzing,remote-jwks,transit,vault,consul}" -- \
    "$SPIRE_BIN/spire-server" "$SPIRE_SERVER_SOCKET" "$SPIRE_TRUST_DOMAIN" "$SPIRE_BUNDLE_ENDPOINT" "$work/ca.pem" \
    || fail "we do not trust SPIRE as we must (examples/spire_trust.rs)"

# --- SPIRE's WIT-SVIDs (experimental, feature flag wit-svid) ----------------
# What SPIRE v1.15.3 makes and where it publishes the key, printed and held
# to: `wit mint` makes a WIT-SVID (typ wit+jwt, kid, cnf.jwk with its alg,
# sub, exp; no iss); the key is in the server API's bundle (wit_authorities)
# but in no SPIFFE bundle: neither the bundle endpoint nor `bundle show
# -format spiffe` carries a `wit-svid` key, so no federated relying party
# can verify SPIRE's WITs yet. When SPIRE publishes them this check fails,
# saying so.
mkdir -p "$work/wit"
SPIRE_SERVER_FFLAGS=wit-svid server wit mint -spiffeID "spiffe://$SPIRE_TRUST_DOMAIN/billing" \
    -ttl 5m -write "$work/wit" > "$work/wit/mint.out" 2>&1 \
    || fail "spire-server wit mint: $(cat "$work/wit/mint.out")"
curl --silent --show-error --cacert "$work/ca.pem" "$SPIRE_BUNDLE_ENDPOINT" > "$work/wit/endpoint.json" \
    || fail "SPIRE's bundle endpoint did not answer"
server bundle show -output json > "$work/wit/api.json"
python3 - "$work/wit" <<'PY' || fail "SPIRE's WIT-SVIDs are not what docs/federation.md says"
import base64, json, sys
d = sys.argv[1]
token = open(f"{d}/token").read().strip()
part = lambda p: json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)))
head, claims = part(token.split(".")[0]), part(token.split(".")[1])
claims["cnf"]["jwk"] = {k: v for k, v in claims["cnf"]["jwk"].items() if k in ("kty", "crv", "alg")}
print(f"  wit mint: header {json.dumps(head, sort_keys=True)}")
print(f"  wit mint: claims {json.dumps(claims, sort_keys=True)}")
assert head["typ"] == "wit+jwt" and head["alg"] == "ES256" and head.get("kid"), head
assert claims["cnf"]["jwk"]["alg"] == "ES256" and "iss" not in claims and claims["sub"].endswith("/billing"), claims
api = [a["key_id"] for a in json.load(open(f"{d}/api.json"))["wit_authorities"]]
uses = sorted(k.get("use", "") for k in json.load(open(f"{d}/endpoint.json"))["keys"])
print(f"  server API bundle: wit_authorities {api}; bundle endpoint key uses: {uses}")
assert head["kid"] in api, (head["kid"], api)
assert "wit-svid" not in uses, "SPIRE's bundle endpoint now publishes wit-svid keys: issue 52 item 4 can go on"
PY

"$SCRIPT_DIR/spire.sh" stop "$work/spire"
echo "spire-interop.sh: OK (SPIRE $("$SPIRE_BIN/spire-server" --version 2>&1 | head -n1) trusts our bundle and follows a revocation)"
