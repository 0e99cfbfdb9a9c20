#!/usr/bin/env bash
# c-install-check.sh -- the installed C library works as C users expect: the
# shared library cargo builds (libworkload_identity_ffi.so, the
# workload-identity-ffi crate) carries the versioned SONAME
# (libworkload_identity.so.<abi>), and where it is installed or staged a file
# of that name is there,
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
release="$(wid_target_dir)/release"
soname="$(wid_soname "$release/libworkload_identity_ffi.so")"
if [ "$soname" != "libworkload_identity.so.$abi" ]; then
    echo "c-install-check: SONAME is '$soname', expected libworkload_identity.so.$abi" >&2
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
scripts/install.sh --no-build --prefix "$prefix" >/dev/null 2>"$work/install.err"
# It tells the user how the program will find the library at run time.
grep -q 'ldconfig' "$work/install.err" && grep -q -- '-Wl,-rpath' "$work/install.err" || {
    echo "c-install-check: install.sh does not say how to find the library at run time:" >&2
    cat "$work/install.err" >&2
    exit 1
}
for f in include/workload_identity.h include/wid_request.h lib/libworkload_identity.a \
    "lib/libworkload_identity.so.$abi" lib/libworkload_identity.so lib/pkgconfig/workload_identity.pc; do
    [ -e "$prefix/$f" ] || { echo "c-install-check: $f was not installed" >&2; exit 1; }
done
# The staged build tree (scripts/lib.sh, what the C and Go tests link) and
# the install: the file the SONAME names is there, and is the library.
wid_stage_lib c-install-check
for dir in "$prefix/lib" "$WID_LIB"; do
    [ "$(wid_soname "$dir/$soname")" = "$soname" ] ||
        { echo "c-install-check: $dir/$soname is missing or is not the library" >&2; exit 1; }
done

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
flags="$(pkg-config --cflags --libs workload_identity)"
# shellcheck disable=SC2086
# docs/c.md's recipe: the run-time path from the .pc itself.
gcc -std=c11 -Wall -Wextra -Werror -pedantic bindings/c/example.c $flags \
    -Wl,-rpath,"$(pkg-config --variable=libdir workload_identity)" -o "$work/example"
# The binary asks for the SONAME, found in the installed lib/.
needed="$(readelf -d "$work/example" | sed -n 's/.*(NEEDED).*\[\(libworkload_identity[^]]*\)\]/\1/p')"
if [ "$needed" != "libworkload_identity.so.$abi" ]; then
    echo "c-install-check: the program needs '$needed', expected libworkload_identity.so.$abi" >&2
    exit 1
fi
# Runs with nothing but the recorded path: no LD_LIBRARY_PATH.
env -u LD_LIBRARY_PATH "$work/example" >/dev/null
# docs/c.md's static recipe: `pkg-config --static` adds what the archive
# needs, and -Bstatic picks the archive: no libworkload_identity at run time.
# shellcheck disable=SC2046
gcc -std=c11 -Wall -Wextra -Werror -pedantic bindings/c/example.c \
    $(pkg-config --cflags workload_identity) \
    -Wl,-Bstatic $(pkg-config --static --libs workload_identity) -Wl,-Bdynamic -o "$work/example_static"
if readelf -d "$work/example_static" | grep -q 'NEEDED.*libworkload_identity'; then
    echo "c-install-check: the pkg-config --static build still needs the shared library" >&2
    exit 1
fi
env -u LD_LIBRARY_PATH "$work/example_static" >/dev/null
# The installer's own contract: --help is help (exit 0), and the build
# directory follows CARGO_TARGET_DIR as cargo does.
scripts/install.sh --help | grep -q -- '--prefix DIR'
[ "$(CARGO_TARGET_DIR="$work/elsewhere" wid_target_dir)" = "$work/elsewhere" ] || {
    echo "c-install-check: wid_target_dir ignores CARGO_TARGET_DIR" >&2
    exit 1
}
echo "c-install-check: OK: SONAME $soname; installed lib/, include/, pkgconfig; example built with pkg-config ($flags) and ran, and statically with pkg-config --static"
