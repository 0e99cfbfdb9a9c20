#!/usr/bin/env bash
# install.sh -- install the C library the way C users expect (rustls-ffi's
# layout, without cargo-c: see docs/c.md for why).
#
#   scripts/install.sh [--prefix DIR] [--libdir DIR] [--destdir DIR] [--no-build] [--from DIR]
#
# Installs (defaults: prefix /usr/local, libdir <prefix>/lib):
#   <prefix>/include/workload_identity.h          the C ABI
#   <prefix>/include/wid_request.h                the IssueRequest encoder for C
#   <libdir>/libworkload_identity.a               static
#   <libdir>/libworkload_identity.so.<version>    shared, SONAME libworkload_identity.so.<abi>
#   <libdir>/libworkload_identity.so.<abi>        -> .so.<version>
#   <libdir>/libworkload_identity.so              -> .so.<abi> (for -lworkload_identity)
#   <libdir>/pkgconfig/workload_identity.pc       `pkg-config --cflags --libs workload_identity`
# --destdir stages the files under DIR (packaging); the .pc still names --prefix.
# Unless --no-build, it first builds the C library, the workload-identity-ffi
# crate (`cargo build --release --locked -p workload-identity-ffi`: the
# library's remote-jwks, vault and consul features), into $CARGO_TARGET_DIR
# when set, as cargo does. Cargo names its files after the crate
# (libworkload_identity_ffi.so/.a in <target dir>/release); they are
# installed under the C names above. --from DIR installs from DIR instead:
# cargo's names, or an installed lib directory's (libworkload_identity.*).
set -euo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
REPO_ROOT="$WID_ROOT"
prefix=/usr/local
libdir=""
destdir=""
build=1
from=""
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix="$2"; shift 2 ;;
        --libdir) libdir="$2"; shift 2 ;;
        --destdir) destdir="$2"; shift 2 ;;
        --no-build) build=0; shift ;;
        --from) from="$2"; shift 2 ;;
        -h|--help) sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "usage: $0 [--prefix DIR] [--libdir DIR] [--destdir DIR] [--no-build] [--from DIR] (--help for more)" >&2; exit 2 ;;
    esac
done
[ -n "$libdir" ] || libdir="$prefix/lib"
includedir="$prefix/include"

if [ "$build" = 1 ]; then
    echo "install.sh: building the C library (cargo build --release --locked -p workload-identity-ffi; minutes the first time)" >&2
    (cd "$REPO_ROOT" && cargo build --release --locked --quiet -p workload-identity-ffi)
fi
[ -n "$from" ] || from="$(wid_target_dir)/release"
# Cargo's names (the crate's), else an installed directory's (the C names).
if [ -f "$from/libworkload_identity_ffi.so" ]; then
    name=workload_identity_ffi
else
    name=workload_identity
fi
header="$WID_HEADER"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO_ROOT/Cargo.toml" | head -1)"
abi="$(wid_abi_version)"
[ -n "$version" ] && [ -n "$abi" ] || { echo "install.sh: cannot read the version or ABI" >&2; exit 1; }
for f in "$from/lib$name.a" "$from/lib$name.so"; do
    [ -f "$f" ] || { echo "install.sh: missing $f: build it (cargo build --release --locked -p workload-identity-ffi) or run without --no-build" >&2; exit 1; }
done

inc="$destdir$includedir"
lib="$destdir$libdir"
mkdir -p "$inc" "$lib/pkgconfig"
install -m 0644 "$header" "$inc/workload_identity.h"
install -m 0644 "$REPO_ROOT/include/wid_request.h" "$inc/wid_request.h"
install -m 0644 "$from/lib$name.a" "$lib/libworkload_identity.a"
install -m 0755 "$from/lib$name.so" "$lib/libworkload_identity.so.$version"
ln -sfn "libworkload_identity.so.$version" "$lib/libworkload_identity.so.$abi"
ln -sfn "libworkload_identity.so.$abi" "$lib/libworkload_identity.so"
cat > "$lib/pkgconfig/workload_identity.pc" <<PC
prefix=$prefix
libdir=$libdir
includedir=$includedir

Name: workload_identity
Description: Mint and verify workload identities (C ABI v$abi)
Version: $version
Libs: -L\${libdir} -lworkload_identity
Libs.private: -lpthread -ldl -lm
Cflags: -I\${includedir}
PC
echo "install.sh: workload_identity $version (C ABI v$abi) installed under $destdir$prefix"
cat >&2 <<NOTE
install.sh: compile with \$(pkg-config --cflags --libs workload_identity)
  (if $libdir/pkgconfig is not on pkg-config's path: PKG_CONFIG_PATH=$libdir/pkgconfig).
  A program linked to the shared library must find it at run time: run
  ldconfig (as root) when $libdir is a system library directory, or link with
  -Wl,-rpath,$libdir; linking libworkload_identity.a needs neither.
NOTE
