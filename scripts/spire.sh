#!/usr/bin/env bash
# spire.sh -- a real SPIRE (server and agent) on loopback for the SPIFFE
# checks: built from tests/spire/go.mod (SPIRE v1.15.3 as a Go tool, the
# default Go caches: a warm machine rebuilds nothing), started with an
# sqlite datastore, the join-token node attestor and the unix workload
# attestor, and stopped.
#
#   scripts/spire.sh build
#       builds spire-server and spire-agent into <target dir>/spire/bin and
#       says how long it took.
#   scripts/spire.sh start DIR
#       writes the configurations under DIR (made if missing; outside the
#       tree), starts the server (trust domain spire.test; its federation
#       bundle endpoint on loopback), makes a join token, starts the agent
#       with it, registers this user's processes as
#       spiffe://spire.test/workload, waits until the agent hands that
#       workload a JWT-SVID, and says how long the start took. DIR/env then
#       holds the addresses and sockets (sourceable: SPIRE_SERVER_SOCKET,
#       SPIRE_AGENT_SOCKET, SPIRE_BUNDLE_ENDPOINT, SPIRE_BIN, ...).
#       With SPIRE_FEDERATE_TD (a trust domain) and SPIRE_FEDERATE_URL (its
#       bundle endpoint, https_web), the server federates with it (trusting
#       the CA bundle SPIRE_FEDERATE_CA names, as a Go program trusts one:
#       SSL_CERT_FILE) and the workload's entry federates with it too, so
#       the agent holds that trust domain's bundle.
#       With SPIRE_ENDPOINT_CERT and SPIRE_ENDPOINT_KEY (PEM), the server's
#       own bundle endpoint has the https_web profile with that certificate
#       (else SPIRE's default, https_spiffe); its refresh hint is 1 m
#       (the shortest SPIRE takes).
#   scripts/spire.sh stop DIR
#       stops the agent and the server (SIGTERM, then SIGKILL after 10 s).
#
# Every wait is bounded (120 s) and names what it waited for when it gives
# up, with the last lines of that process's log.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$SCRIPT_DIR/lib.sh"

SPIRE_MODULE="$WID_ROOT/tests/spire"
TRUST_DOMAIN="spire.test"
WAIT_SECS=120

die() {
    echo "spire.sh: $*" >&2
    exit 1
}

spire_bin_dir() {
    echo "$(wid_target_dir)/spire/bin"
}


# wait_for WHAT LOG CMD...: runs CMD until it succeeds, for WAIT_SECS at most.
wait_for() {
    local what="$1" log="$2" start
    shift 2
    start=$(date +%s)
    until "$@" >/dev/null 2>&1; do
        if [ $(( $(date +%s) - start )) -ge "$WAIT_SECS" ]; then
            echo "spire.sh: $what: not within ${WAIT_SECS}s; the last lines of $log:" >&2
            tail -n 20 "$log" >&2 || true
            exit 1
        fi
        sleep 0.5
    done
}

cmd_build() {
    local bin start
    bin="$(spire_bin_dir)"
    mkdir -p "$bin"
    wid_go_setup spire.sh
    local have want
    have="$(go env GOVERSION)"
    have="${have#go}"
    want="$(sed -n 's/^go \([0-9][0-9.]*\)$/\1/p' "$SPIRE_MODULE/go.mod")"
    wid_version_at_least "$have" "$want" \
        || die "$(command -v go) is Go $have, older than tests/spire/go.mod's \"go $want\" (SPIRE v1.15.3's own): install Go $want or newer"
    start=$(date +%s)
    (cd "$SPIRE_MODULE" && go build -o "$bin/" \
        github.com/spiffe/spire/cmd/spire-server github.com/spiffe/spire/cmd/spire-agent)
    echo "spire.sh: built $("$bin/spire-server" --version 2>&1 | head -n1) (spire-server, spire-agent) in $(( $(date +%s) - start ))s into $bin"
}

cmd_start() {
    local dir="$1" bin start port bundle_port health_port agent_health token
    bin="$(spire_bin_dir)"
    [ -x "$bin/spire-server" ] && [ -x "$bin/spire-agent" ] || die "no SPIRE in $bin: run scripts/spire.sh build first"
    mkdir -p "$dir/server/data" "$dir/agent/data" "$dir/agent/public"
    dir="$(cd "$dir" && pwd)"
    port=$(wid_free_port)
    bundle_port=$(wid_free_port)
    health_port=$(wid_free_port)
    agent_health=$(wid_free_port)
    start=$(date +%s)
    # The bundle endpoint's profile: https_web with the certificate given
    # (SPIRE_ENDPOINT_CERT, SPIRE_ENDPOINT_KEY), else SPIRE's default,
    # https_spiffe.
    local endpoint_profile="" bundle_scheme_note="https_spiffe"
    if [ -n "${SPIRE_ENDPOINT_CERT:-}" ]; then
        endpoint_profile="      profile \"https_web\" {
        serving_cert_file {
          cert_file_path = \"$SPIRE_ENDPOINT_CERT\"
          key_file_path = \"$SPIRE_ENDPOINT_KEY\"
          file_sync_interval = \"1h\"
        }
      }"
        bundle_scheme_note="https_web"
    fi
    # SPIRE_WIT_SVID=1: SPIRE's experimental WIT-SVIDs (its feature flag
    # wit-svid; `SPIRE_SERVER_FFLAGS=wit-svid spire-server wit mint`).
    local experimental=""
    if [ "${SPIRE_WIT_SVID:-0}" = 1 ]; then
        experimental='  experimental {
    feature_flags = ["wit-svid"]
  }'
    fi
    local federates="" federate_flags=()
    if [ -n "${SPIRE_FEDERATE_TD:-}" ]; then
        [ -n "${SPIRE_FEDERATE_URL:-}" ] || die "SPIRE_FEDERATE_TD needs SPIRE_FEDERATE_URL (its bundle endpoint)"
        federates="    federates_with \"$SPIRE_FEDERATE_TD\" {
      bundle_endpoint_url = \"$SPIRE_FEDERATE_URL\"
      bundle_endpoint_profile \"https_web\" {}
    }"
        federate_flags=(-federatesWith "spiffe://$SPIRE_FEDERATE_TD")
    fi
    cat > "$dir/server/server.conf" <<EOF
server {
  bind_address = "127.0.0.1"
  bind_port = "$port"
  socket_path = "$dir/server/api.sock"
  trust_domain = "$TRUST_DOMAIN"
  data_dir = "$dir/server/data"
  log_level = "INFO"
  ca_ttl = "24h"
  default_x509_svid_ttl = "1h"
  default_jwt_svid_ttl = "5m"
$experimental
  federation {
    bundle_endpoint {
      address = "127.0.0.1"
      port = $bundle_port
      refresh_hint = "1m"
$endpoint_profile
    }
$federates
  }
}
plugins {
  DataStore "sql" {
    plugin_data {
      database_type = "sqlite3"
      connection_string = "$dir/server/data/datastore.sqlite3"
    }
  }
  NodeAttestor "join_token" {
    plugin_data {}
  }
  KeyManager "memory" {
    plugin_data {}
  }
}
health_checks {
  listener_enabled = true
  bind_address = "127.0.0.1"
  bind_port = "$health_port"
}
EOF
    if [ -n "${SPIRE_FEDERATE_CA:-}" ]; then
        SSL_CERT_FILE="$SPIRE_FEDERATE_CA" "$bin/spire-server" run -config "$dir/server/server.conf" > "$dir/server/log" 2>&1 &
    else
        "$bin/spire-server" run -config "$dir/server/server.conf" > "$dir/server/log" 2>&1 &
    fi
    echo $! > "$dir/server/pid"
    wait_for "spire-server healthy" "$dir/server/log" \
        "$bin/spire-server" healthcheck -socketPath "$dir/server/api.sock"
    token="$("$bin/spire-server" token generate -socketPath "$dir/server/api.sock" \
        -spiffeID "spiffe://$TRUST_DOMAIN/agent/ci" | sed -n 's/^Token: //p')"
    [ -n "$token" ] || die "spire-server token generate printed no token"
    "$bin/spire-server" bundle show -socketPath "$dir/server/api.sock" > "$dir/agent/bootstrap.crt"
    cat > "$dir/agent/agent.conf" <<EOF
agent {
  data_dir = "$dir/agent/data"
  log_level = "INFO"
  server_address = "127.0.0.1"
  server_port = "$port"
  socket_path = "$dir/agent/public/api.sock"
  trust_bundle_path = "$dir/agent/bootstrap.crt"
  trust_domain = "$TRUST_DOMAIN"
}
plugins {
  NodeAttestor "join_token" {
    plugin_data {}
  }
  KeyManager "memory" {
    plugin_data {}
  }
  WorkloadAttestor "unix" {
    plugin_data {}
  }
}
health_checks {
  listener_enabled = true
  bind_address = "127.0.0.1"
  bind_port = "$agent_health"
}
EOF
    "$bin/spire-agent" run -config "$dir/agent/agent.conf" -joinToken "$token" > "$dir/agent/log" 2>&1 &
    echo $! > "$dir/agent/pid"
    wait_for "spire-agent healthy" "$dir/agent/log" \
        "$bin/spire-agent" healthcheck -socketPath "$dir/agent/public/api.sock"
    # The entry docs/federation.md shows is this one, with this run's names
    # (its block's flags are checked here): federating with the peer's
    # trust domain is what hands its bundle to the workload.
    local doc_entry
    doc_entry="$(awk '/<!-- checked by scripts\/spire.sh: entry -->/ { f = 1; next }
        f && /^```sh/ { g = 1; next } g && /^```/ { exit } g' "$WID_ROOT/docs/federation.md")"
    for flag in "spire-server entry create" -parentID -spiffeID "-selector unix:uid:" -federatesWith; do
        grep -q -- "$flag" <<<"$doc_entry" \
            || die "docs/federation.md's block marked 'checked by scripts/spire.sh: entry' lacks $flag"
    done
    "$bin/spire-server" entry create -socketPath "$dir/server/api.sock" \
        -parentID "spiffe://$TRUST_DOMAIN/agent/ci" -spiffeID "spiffe://$TRUST_DOMAIN/workload" \
        -selector "unix:uid:$(id -u)" "${federate_flags[@]}" > "$dir/server/entry" \
        || die "spire-server entry create: $(cat "$dir/server/entry")"
    # The entry reaches the agent at its next sync (every 5 s by default).
    wait_for "a JWT-SVID for spiffe://$TRUST_DOMAIN/workload from the agent" "$dir/agent/log" \
        "$bin/spire-agent" api fetch jwt -audience spire-sh-check -socketPath "$dir/agent/public/api.sock"
    cat > "$dir/env" <<EOF
SPIRE_BIN=$bin
SPIRE_TRUST_DOMAIN=$TRUST_DOMAIN
SPIRE_SERVER_SOCKET=$dir/server/api.sock
SPIRE_AGENT_SOCKET=$dir/agent/public/api.sock
SPIRE_SERVER_ADDRESS=127.0.0.1:$port
SPIRE_BUNDLE_ENDPOINT=https://127.0.0.1:$bundle_port
SPIRE_BUNDLE_PROFILE=$bundle_scheme_note
SPIRE_WORKLOAD_ID=spiffe://$TRUST_DOMAIN/workload
EOF
    echo "spire.sh: SPIRE $TRUST_DOMAIN up in $(( $(date +%s) - start ))s: server 127.0.0.1:$port (bundle endpoint https://127.0.0.1:$bundle_port), agent $dir/agent/public/api.sock; a workload JWT-SVID was fetched"
}

stop_one() {
    local name="$1" pidfile="$2" pid i
    [ -f "$pidfile" ] || return 0
    pid="$(cat "$pidfile")"
    if kill -TERM "$pid" 2>/dev/null; then
        for i in $(seq 1 20); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.5
        done
        if kill -0 "$pid" 2>/dev/null; then
            echo "spire.sh: $name (pid $pid) still running 10s after SIGTERM: SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$pidfile"
}

cmd_stop() {
    local dir="$1"
    stop_one spire-agent "$dir/agent/pid"
    stop_one spire-server "$dir/server/pid"
    echo "spire.sh: SPIRE under $dir stopped"
}

case "${1:-}" in
    build) cmd_build ;;
    start) [ $# -eq 2 ] || die "usage: spire.sh start DIR"; cmd_start "$2" ;;
    stop) [ $# -eq 2 ] || die "usage: spire.sh stop DIR"; cmd_stop "$2" ;;
    *) die "usage: spire.sh build | start DIR | stop DIR" ;;
esac
