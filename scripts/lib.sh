#!/usr/bin/env bash
# lib.sh -- helpers shared by the scripts; source it: `source scripts/lib.sh`.
#
#   wid_apt_install PKG...   installs Debian packages (sudo unless root), once
#                            per call, quietly; fails if neither is possible
#   wid_find_lib NAME        sets WID_LIB (the library directory) and WID_INC
#                            (the header directory): $WID_LIB_DIR when set (its
#                            own workload_identity.h if it has one, else
#                            include/), otherwise <target dir>/release after
#                            `cargo build --release --locked $WID_LIB_FEATURES`.
#                            NAME prefixes its messages.
#   WID_LIB_FEATURES         the cargo flags the C library is built with:
#                            `--features remote-jwks,vault,consul` (the wid_remote_jwks_*, wid_vault_login_config_* and wid_consul_login_config_*
#                            functions work; without it they refuse)
#   wid_target_dir           where cargo builds: $CARGO_TARGET_DIR or the
#                            build configuration's, else target/
#   wid_abi_version          the C ABI version the header declares
#   wid_soname FILE          the SONAME recorded in a shared library (empty if none)
#   WID_ROOT                 the repository root

WID_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# One place for the C library's features: every script that builds it (and
# .ci/run) builds the same library, so cargo does not rebuild it between them.
WID_LIB_FEATURES="--features remote-jwks,vault,consul"

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

wid_abi_version() {
    sed -n 's/^#define WID_ABI_VERSION \([0-9]*\)$/\1/p' "$WID_ROOT/include/workload_identity.h"
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

wid_find_lib() {
    local who="$1"
    if [ -n "${WID_LIB_DIR:-}" ]; then
        WID_LIB="$(cd "$WID_LIB_DIR" && pwd)"
        if [ -f "$WID_LIB/workload_identity.h" ]; then
            WID_INC="$WID_LIB"
        else
            WID_INC="$WID_ROOT/include"
        fi
    else
        echo "$who: building the release library (cargo build --release --locked $WID_LIB_FEATURES; minutes the first time)" >&2
        # shellcheck disable=SC2086
        (cd "$WID_ROOT" && cargo build --release --locked --quiet $WID_LIB_FEATURES)
        WID_LIB="$(wid_target_dir)/release"
        WID_INC="$WID_ROOT/include"
    fi
    local f
    for f in "$WID_LIB/libworkload_identity.a" "$WID_LIB/libworkload_identity.so" "$WID_INC/workload_identity.h"; do
        if [ ! -f "$f" ]; then
            echo "$who: missing $f" >&2
            return 1
        fi
    done
    if ! cmp -s "$WID_INC/workload_identity.h" "$WID_ROOT/include/workload_identity.h"; then
        echo "$who: warning: $WID_INC/workload_identity.h differs from include/workload_identity.h" >&2
    fi
}
