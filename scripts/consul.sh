#!/usr/bin/env bash
# consul.sh -- a real Consul for the ConsulLogin checks: built from
# tests/consul/go.mod (Consul v1.16.3, MPL-2.0, as a Go tool; the default Go
# caches, so a warm machine rebuilds nothing). The tests start and stop
# their own agents (`consul agent -dev` on loopback ports of their own):
# wid/tests/consul.rs and tests/seed001/harness.py.
#
#   scripts/consul.sh build
#       builds consul into <target dir>/consul/bin and says how long it
#       took and what `consul version` answers.
#   scripts/consul.sh bin
#       prints the path of the built consul (the tests' default;
#       WID_CONSUL_BIN overrides it).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$SCRIPT_DIR/lib.sh"

CONSUL_MODULE="$WID_ROOT/tests/consul"

die() {
    echo "consul.sh: $*" >&2
    exit 1
}

consul_bin() {
    echo "$(wid_target_dir)/consul/bin/consul"
}

cmd_build() {
    local bin have want start
    bin="$(consul_bin)"
    mkdir -p "$(dirname "$bin")"
    wid_go_setup consul.sh
    have="$(go env GOVERSION)"
    have="${have#go}"
    want="$(sed -n 's/^go \([0-9][0-9.]*\)$/\1/p' "$CONSUL_MODULE/go.mod")"
    wid_version_at_least "$have" "$want" \
        || die "$(command -v go) is Go $have, older than tests/consul/go.mod's \"go $want\": install Go $want or newer"
    start=$(date +%s)
    (cd "$CONSUL_MODULE" && go build -o "$bin" github.com/hashicorp/consul)
    echo "consul.sh: built $("$bin" version | head -n1) in $(( $(date +%s) - start ))s into $bin"
}

case "${1:-}" in
    build) cmd_build ;;
    bin) consul_bin ;;
    *) die "usage: scripts/consul.sh build | bin" ;;
esac
