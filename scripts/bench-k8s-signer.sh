#!/usr/bin/env bash
# bench-k8s-signer.sh -- `wid k8s-signer`'s Sign as kube-apiserver calls it
# (gRPC over the Unix socket, through the published k8s.io/externaljwt
# stubs: p50, p99 and signs per second, ES256 and RS256), beside the
# library's ServiceAccountSigner::sign and Issuer::issue_with for the same
# algorithm (criterion, benches/service_account.rs), in one run on one
# machine. Benchmarks only: nothing here asserts a time.
#
#   scripts/bench-k8s-signer.sh
#
# Environment:
#   WID_K8S_BENCH_CALLS   Sign calls per algorithm over the socket (default 5000)
#   WID_BIN               the wid binary (default: cargo build --release -p wid)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$SCRIPT_DIR/lib.sh"
wid_go_setup bench-k8s-signer.sh
cd "$WID_ROOT"

calls="${WID_K8S_BENCH_CALLS:-5000}"
if [ -z "${WID_BIN:-}" ]; then
    cargo build --release --locked --quiet -p wid
    WID_BIN="$(wid_target_dir)/release/wid"
fi
case "$WID_BIN" in
    /*) ;;
    *) WID_BIN="$PWD/$WID_BIN" ;;
esac
export WID_BIN

echo "== CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') ($(nproc) cores)"
echo "== Sign over the socket (gRPC, insecure credentials, as kube-apiserver dials): $calls calls per algorithm"
(cd bindings/go/interop && go test -count=1 -run '^$' -bench 'BenchmarkSignOverSocket' \
    -benchtime "${calls}x" ./k8ssigner/)
echo "== the library, in process (criterion)"
cargo bench --locked --quiet --bench service_account -- --warm-up-time 2 --measurement-time 5 2>&1 |
    grep -E '^service_account/|time:'
