#!/usr/bin/env bash
# lib.sh -- helpers shared by the scripts; source it: `source scripts/lib.sh`.
#
#   wid_apt_install PKG...   installs Debian packages (sudo unless root), once
#                            per call, quietly; fails if neither is possible
#   wid_find_lib NAME        sets WID_LIB (the library directory) and WID_INC
#                            (the header directory): $WID_LIB_DIR when set (its
#                            own workload_identity.h if it has one, else
#                            include/), otherwise the build tree's C library
#                            staged as installed (wid_stage_lib). NAME prefixes
#                            its messages.
#   wid_stage_lib NAME       builds the C library (the workload-identity-ffi
#                            crate: `cargo build --release --locked -p
#                            workload-identity-ffi`) and lays it out as
#                            scripts/install.sh installs it, under
#                            <target dir>/c: include/, lib/ with
#                            libworkload_identity.so.<version>, the SONAME's
#                            .so.<abi> and .so links, the .a, and the .pc; sets
#                            WID_LIB and WID_INC to its lib/ and include/
#   WID_LIB_FEATURES         the library's features in the C library
#                            (`--features remote-jwks,vault,consul`, the C
#                            crate's defaults): scripts that build the
#                            library's own examples beside it pass them, so
#                            cargo builds the library once for both
#   wid_target_dir           where cargo builds: $CARGO_TARGET_DIR or the
#                            build configuration's, else target/
#   wid_abi_version          the C ABI version the header declares
#   WID_HEADER               include/workload_identity.h
#   wid_soname FILE          the SONAME recorded in a shared library (empty if none)
#   WID_ROOT                 the repository root
#   wid_go_setup NAME        checks the machine's Go (on PATH, at least every
#                            go.mod's `go` line) and exports module-mode
#                            settings for this script: GO111MODULE=on,
#                            GOFLAGS=-mod=readonly (go.mod and go.sum are
#                            never edited), GOTOOLCHAIN=local (no toolchain
#                            download), GOWORK=off; GOPROXY stays the
#                            machine's. NAME prefixes its messages.
#   WID_GO_MODULES           the Go modules, relative to WID_ROOT
#   wid_free_port            a free loopback TCP port (the kernel picks)

WID_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# One place for the C library's features: every script that builds it (and
# .ci/run) builds the same library, so cargo does not rebuild it between them.
WID_LIB_FEATURES="--features remote-jwks,vault,consul"
WID_HEADER="$WID_ROOT/include/workload_identity.h"

wid_apt_install() {
    local sudo=""
    if [ "$(id -u)" != 0 ]; then
        if ! command -v sudo >/dev/null 2>&1; then
            echo "need root or sudo to install: $*" >&2
            return 1
        fi
        sudo="sudo"
    fi
    echo "installing Debian packages: $*" >&2
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

wid_free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

wid_abi_version() {
    sed -n 's/^#define WID_ABI_VERSION \([0-9]*\)$/\1/p' "$WID_HEADER"
}

wid_soname() {
    readelf -d "$1" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p'
}

# The directory cargo builds into: $CARGO_TARGET_DIR or the build
# configuration's, else target/ in the repository.
wid_target_dir() {
    local dir
    # Set: what cargo uses, even where no cargo is installed (a relative one
    # is taken from the repository root, where these scripts run cargo).
    if [ -n "${CARGO_TARGET_DIR:-}" ]; then
        case "$CARGO_TARGET_DIR" in
            /*) echo "$CARGO_TARGET_DIR" ;;
            *) echo "$WID_ROOT/$CARGO_TARGET_DIR" ;;
        esac
        return
    fi
    dir="$(cd "$WID_ROOT" && cargo metadata --format-version 1 --no-deps 2>/dev/null \
        | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
    echo "${dir:-$WID_ROOT/target}"
}

wid_stage_lib() {
    local who="$1" stage out
    echo "$who: building the C library (cargo build --release --locked -p workload-identity-ffi; minutes the first time)" >&2
    (cd "$WID_ROOT" && cargo build --release --locked --quiet -p workload-identity-ffi)
    stage="$(wid_target_dir)/c"
    if ! out="$("$WID_ROOT/scripts/install.sh" --no-build --prefix "$stage" 2>&1)"; then
        echo "$out" >&2
        return 1
    fi
    WID_LIB="$stage/lib"
    WID_INC="$stage/include"
}

wid_find_lib() {
    local who="$1"
    if [ -n "${WID_LIB_DIR:-}" ]; then
        WID_LIB="$(cd "$WID_LIB_DIR" && pwd)"
        if [ -f "$WID_LIB/workload_identity.h" ]; then
            WID_INC="$WID_LIB"
        elif [ -f "$WID_LIB/../include/workload_identity.h" ]; then
            WID_INC="$(cd "$WID_LIB/../include" && pwd)"
        else
            WID_INC="$WID_ROOT/include"
        fi
    else
        wid_stage_lib "$who"
    fi
    local f
    for f in "$WID_LIB/libworkload_identity.a" "$WID_LIB/libworkload_identity.so" "$WID_INC/workload_identity.h"; do
        if [ ! -f "$f" ]; then
            echo "$who: missing $f" >&2
            return 1
        fi
    done
    if ! cmp -s "$WID_INC/workload_identity.h" "$WID_HEADER"; then
        echo "$who: warning: $WID_INC/workload_identity.h differs from include/workload_identity.h" >&2
    fi
}

# The Go modules: the binding, its interop checks, and the test programs
# (tests/go.mod: go/msgpack, go/verifyonly, go/ed25519seed, seed001/host).
WID_GO_MODULES="bindings/go bindings/go/interop tests"

# Succeeds when version $1 (1.26.8, 1.26, 1.27rc1) is at least $2.
wid_version_at_least() {
    awk -v have="$1" -v want="$2" 'BEGIN {
        n = split(have, h, "."); m = split(want, w, ".")
        for (i = 1; i <= (n > m ? n : m); i++) {
            a = (i in h) ? h[i] + 0 : 0; b = (i in w) ? w[i] + 0 : 0
            if (a != b) exit !(a > b)
        }
        exit 0
    }'
}

wid_go_setup() {
    local who="$1" have mod want
    if ! command -v go >/dev/null 2>&1; then
        echo "$who: no go on PATH: the Go checks need the machine's Go toolchain (https://go.dev/doc/install); Debian's golang-go is too old for these modules" >&2
        return 1
    fi
    have="$(GOTOOLCHAIN=local go env GOVERSION)"
    have="${have#go}"
    for mod in $WID_GO_MODULES; do
        want="$(sed -n 's/^go \([0-9][0-9.]*\)$/\1/p' "$WID_ROOT/$mod/go.mod")"
        if [ -z "$want" ]; then
            echo "$who: $mod/go.mod has no go line" >&2
            return 1
        fi
        if ! wid_version_at_least "$have" "$want"; then
            echo "$who: $(command -v go) is Go $have, older than $mod/go.mod's \"go $want\": install Go $want or newer" >&2
            return 1
        fi
    done
    export GO111MODULE=on GOFLAGS=-mod=readonly GOTOOLCHAIN=local GOWORK=off
}
