#!/usr/bin/env bash
# go-tests.sh -- build/locate the C library and check every Go module in
# module mode (scripts/lib.sh WID_GO_MODULES: bindings/go, the binding;
# bindings/go/interop, the relying-party checks with go-jose v4, go-oidc v3
# and go-spiffe v2; tests, the test programs), with the machine's Go and the
# modules go.mod/go.sum pin (-mod=readonly: nothing is edited).
#
#   scripts/go-tests.sh
#       gofmt -l, go vet and staticcheck (pinned in tests/go.mod) on every
#       module; go test -race on the binding and the interop module,
#       statically linked against libworkload_identity.a; then the binding's
#       tests again linked dynamically against libworkload_identity.so; then
#       the module recipe of bindings/go/README.md (go-packaging-check.sh).
#
# Environment:
#   WID_LIB_DIR   directory holding libworkload_identity.a (and .so, with its
#                 SONAME's .so.<abi>) and, optionally, workload_identity.h;
#                 when unset the C library is built (`cargo build --release
#                 --locked -p workload-identity-ffi`) and staged as installed
#                 under <cargo target dir>/c ($CARGO_TARGET_DIR, else target/;
#                 scripts/lib.sh wid_stage_lib).
#   WID_BIN       the `wid` binary the interop checks serve discovery and the
#                 SPIFFE bundle with (default: cargo build --release -p wid).
#   WID_GO_BENCH  1: also run the benchmarks (BenchmarkVerifyBinding vs.
#                 BenchmarkVerifyGoJose, their ES256/RS256 variants, issue
#                 vs. go-jose sign, ...), without -race.
#   WID_GO_BENCHTIME  go test -benchtime for them (default 1s).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
# shellcheck source=lib.sh
source "$SCRIPT_DIR/lib.sh"
wid_go_setup go-tests.sh

# The Kubernetes signer's interop tests run two `wid serve` on one keyring in
# a real etcd (Debian's etcd-server): install it when missing, as the etcd
# step of .ci/run does (this step may run first on a fresh machine).
command -v etcd >/dev/null 2>&1 || wid_apt_install etcd-server

# --- the library and wid ----------------------------------------------------
wid_find_lib go-tests.sh
lib_dir="$WID_LIB"
inc_dir="$WID_INC"
static_lib="$lib_dir/libworkload_identity.a"
if [ -z "${WID_BIN:-}" ]; then
    echo "go-tests.sh: cargo build --release --locked -p wid (the interop checks serve with it)" >&2
    (cd "$REPO_ROOT" && cargo build --release --locked --quiet -p wid)
    WID_BIN="$(wid_target_dir)/release/wid"
fi
# Absolute: the tests run in the modules' directories.
case "$WID_BIN" in
    /*) ;;
    *) WID_BIN="$PWD/$WID_BIN" ;;
esac
[ -x "$WID_BIN" ] || { echo "go-tests.sh: WID_BIN=$WID_BIN is not an executable" >&2; exit 1; }
export WID_BIN

export CGO_ENABLED=1
export CGO_CFLAGS="-g -O2 -I$inc_dir"
static_ldflags="$static_lib -lpthread -ldl -lm"
dynamic_ldflags="-L$lib_dir -lworkload_identity -Wl,-rpath,$lib_dir"

echo "== go: $(go version) (GOFLAGS=$GOFLAGS GOTOOLCHAIN=$GOTOOLCHAIN)"
echo "== library: $lib_dir (header: $inc_dir); wid: $WID_BIN"

echo "== gofmt"
gofiles=()
for mod in $WID_GO_MODULES; do
    gofiles+=("$REPO_ROOT/$mod")
done
unformatted="$(gofmt -l "${gofiles[@]}")"
if [ -n "$unformatted" ]; then
    echo "go-tests.sh: not gofmt-ed:" >&2
    echo "$unformatted" >&2
    exit 1
fi

# staticcheck at the version tests/go.mod pins (a tool directive), built
# once and run in each module.
tools="$(mktemp -d "${TMPDIR:-/tmp}/wid-go-tools.XXXXXX")"
trap 'rm -rf "$tools"' EXIT
(cd "$REPO_ROOT/tests" && go build -o "$tools/staticcheck" honnef.co/go/tools/cmd/staticcheck)
echo "== staticcheck: $("$tools/staticcheck" -version)"

for mod in $WID_GO_MODULES; do
    echo "== $mod: go vet ./... and staticcheck ./... (static)"
    (cd "$REPO_ROOT/$mod" && CGO_LDFLAGS="$static_ldflags" go vet ./... &&
        CGO_LDFLAGS="$static_ldflags" "$tools/staticcheck" ./...)
done

for mod in bindings/go bindings/go/interop; do
    echo "== $mod: go test -race -count=1 ./... (static)"
    (cd "$REPO_ROOT/$mod" && CGO_LDFLAGS="$static_ldflags" go test -race -count=1 ./...)
done

dynamic="skipped (no .so)"
if [ -f "$lib_dir/libworkload_identity.so" ]; then
    echo "== bindings/go: go test -count=1 ./... (dynamic: libworkload_identity.so)"
    (cd "$REPO_ROOT/bindings/go" && CGO_LDFLAGS="$dynamic_ldflags" go test -count=1 ./...)
    dynamic="ok"
fi

bench="not run (WID_GO_BENCH=1 to run)"
if [ "${WID_GO_BENCH:-0}" = "1" ]; then
    echo "== go test -bench (static, no -race)"
    bench_out="$(cd "$REPO_ROOT/bindings/go/interop" && CGO_LDFLAGS="$static_ldflags" go test -count=1 -run '^$' -bench . \
        -benchtime "${WID_GO_BENCHTIME:-1s}" -benchmem .)"
    echo "$bench_out"
    ns() { awk -v b="$1" '$1 ~ "^"b"(-[0-9]+)?$" { print $3; exit }' <<<"$bench_out"; }
    bench="verify ns/op binding vs go-jose:"
    for alg in "" ES256 RS256; do
        bench="$bench ${alg:-EdDSA} $(ns "BenchmarkVerifyBinding$alg") vs $(ns "BenchmarkVerifyGoJose$alg");"
    done
    bench="${bench%;}"
fi

echo "== go packaging: the module recipe of bindings/go/README.md, in an empty module"
WID_LIB_DIR="$lib_dir" "$SCRIPT_DIR/go-packaging-check.sh"

echo "go-tests.sh: OK: gofmt, vet, staticcheck for $WID_GO_MODULES; race tests (static) for bindings/go and bindings/go/interop; dynamic link: $dynamic; bench: $bench"
