#!/usr/bin/env bash
# c-install-check.sh -- the installed C library works as C users expect: the
# shared library carries the versioned SONAME (libworkload_identity.so.<abi>),
# scripts/install.sh lays out lib/, include/ and the .pc, and a C program builds
# with nothing but `pkg-config --cflags --libs workload_identity` and runs
# against the installed library. Needs the release build and pkg-config.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
# shellcheck source=lib.sh
source scripts/lib.sh
command -v pkg-config >/dev/null 2>&1 || wid_apt_install pkg-config
abi="$(wid_abi_version)"
soname="$(wid_soname target/release/libworkload_identity.so)"
if [ "$soname" != "libworkload_identity.so.$abi" ]; then
    echo "c-install-check: SONAME is '$soname', expected libworkload_identity.so.$abi" >&2
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
scripts/install.sh --no-build --prefix "$prefix" >/dev/null
for f in include/workload_identity.h include/wid_request.h lib/libworkload_identity.a \
    "lib/libworkload_identity.so.$abi" lib/libworkload_identity.so lib/pkgconfig/workload_identity.pc; do
    [ -e "$prefix/$f" ] || { echo "c-install-check: $f was not installed" >&2; exit 1; }
done

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
flags="$(pkg-config --cflags --libs workload_identity)"
# shellcheck disable=SC2086
gcc -std=c11 -Wall -Wextra -Werror -pedantic bindings/c/example.c $flags \
    -Wl,-rpath,"$prefix/lib" -o "$work/example"
# The binary asks for the SONAME, found in the installed lib/.
needed="$(readelf -d "$work/example" | sed -n 's/.*(NEEDED).*\[\(libworkload_identity[^]]*\)\]/\1/p')"
if [ "$needed" != "libworkload_identity.so.$abi" ]; then
    echo "c-install-check: the program needs '$needed', expected libworkload_identity.so.$abi" >&2
    exit 1
fi
"$work/example" >/dev/null
echo "c-install-check: OK: SONAME $soname; installed lib/, include/, pkgconfig; example built with pkg-config ($flags) and ran"
