#!/usr/bin/env bash
# go-tests.sh -- build/locate the C library and test the Go binding.
#
#   scripts/go-tests.sh
#       go vet + go test -race on bindings/go/wid (package wid) and
#       bindings/go/interop (go-jose v2 interop checks), statically linked
#       against libworkload_identity.a; then a short run linked dynamically
#       against libworkload_identity.so (when it exists).
#
# Environment:
#   WID_LIB_DIR   directory holding libworkload_identity.a (and .so, with its
#                 SONAME's .so.<abi>) and, optionally, workload_identity.h;
#                 when unset the C library is built (`cargo build --release
#                 --locked -p workload-identity-ffi`) and staged as installed
#                 under <cargo target dir>/c ($CARGO_TARGET_DIR, else target/;
#                 scripts/lib.sh wid_stage_lib).
#   WID_GO_BENCH  1: also run the benchmarks (BenchmarkVerifyBinding vs.
#                 BenchmarkVerifyGoJose, their ES256/RS256 variants, issue
#                 vs. go-jose sign, ...), without -race.
#   WID_GO_BENCHTIME  go test -benchtime for them (default 1s).
#
# The packages are symlinked into this checkout's GOPATH (go-env.sh)
# as workload-identity/wid and workload-identity/interop.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
"$SCRIPT_DIR/go-deps.sh"
# shellcheck source=go-env.sh
source "$SCRIPT_DIR/go-env.sh"

# --- the library ------------------------------------------------------------
# shellcheck source=lib.sh
source "$SCRIPT_DIR/lib.sh"
wid_find_lib go-tests.sh
lib_dir="$WID_LIB"
inc_dir="$WID_INC"
static_lib="$lib_dir/libworkload_identity.a"

# --- GOPATH layout ----------------------------------------------------------
gopath_first="$WID_GOPATH_FIRST"
pkg_root="$gopath_first/src/workload-identity"
mkdir -p "$pkg_root"
ln -sfn "$REPO_ROOT/bindings/go/wid" "$pkg_root/wid"
ln -sfn "$REPO_ROOT/bindings/go/interop" "$pkg_root/interop"
pkgs=(workload-identity/wid workload-identity/interop)

export CGO_ENABLED=1
export CGO_CFLAGS="-g -O2 -I$inc_dir"
static_ldflags="$static_lib -lpthread -ldl -lm"
dynamic_ldflags="-L$lib_dir -lworkload_identity -Wl,-rpath,$lib_dir"

echo "== go: $(wid_go version)"
echo "== library: $lib_dir (header: $inc_dir)"

echo "== gofmt"
unformatted="$(gofmt -l "$REPO_ROOT/bindings/go")"
if [ -n "$unformatted" ]; then
    echo "go-tests.sh: not gofmt-ed:" >&2
    echo "$unformatted" >&2
    exit 1
fi

echo "== go vet (static)"
CGO_LDFLAGS="$static_ldflags" wid_go vet "${pkgs[@]}"

echo "== go test -race -count=1 (static)"
CGO_LDFLAGS="$static_ldflags" wid_go test -race -count=1 "${pkgs[@]}"

dynamic="skipped (no .so)"
if [ -f "$lib_dir/libworkload_identity.so" ]; then
    echo "== go test -count=1 (dynamic: libworkload_identity.so)"
    CGO_LDFLAGS="$dynamic_ldflags" wid_go test -count=1 "${pkgs[@]}"
    dynamic="ok"
fi

bench="not run (WID_GO_BENCH=1 to run)"
if [ "${WID_GO_BENCH:-0}" = "1" ]; then
    echo "== go test -bench (static, no -race)"
    bench_out="$(CGO_LDFLAGS="$static_ldflags" wid_go test -count=1 -run '^$' -bench . \
        -benchtime "${WID_GO_BENCHTIME:-1s}" -benchmem workload-identity/interop)"
    echo "$bench_out"
    ns() { awk -v b="$1" '$1 ~ "^"b"(-[0-9]+)?$" { print $3; exit }' <<<"$bench_out"; }
    bench="verify ns/op binding vs go-jose:"
    for alg in "" ES256 RS256; do
        bench="$bench ${alg:-EdDSA} $(ns "BenchmarkVerifyBinding$alg") vs $(ns "BenchmarkVerifyGoJose$alg");"
    done
    bench="${bench%;}"
fi

echo "== go packaging: go-env.sh hygiene, module mode via bindings/go/go.mod"
WID_LIB_DIR="$lib_dir" "$SCRIPT_DIR/go-packaging-check.sh"

echo "go-tests.sh: OK: vet + race tests (static) passed for ${pkgs[*]}; dynamic link: $dynamic; bench: $bench"
