#!/usr/bin/env bash
# C ABI tests: compiles bindings/c/example.c, identity_manager.c and test.c against the
# static library with strict warnings, checks the header alone compiles as C11
# and as C++17, runs the example and the tests under valgrind (no memory errors,
# no definitely-lost bytes), and runs the tests once more against the shared
# library.
#
# Usage: scripts/c-tests.sh
#   WID_LIB_DIR=dir  use an already built library: dir holds
#                    libworkload_identity.a, libworkload_identity.so (and its
#                    SONAME's .so.<abi>) and, optionally,
#                    workload_identity.h. Unset: builds the C library
#                    (`cargo build --release --locked -p
#                    workload-identity-ffi`) and stages it as installed under
#                    <target dir>/c (scripts/lib.sh, wid_stage_lib). A library
#                    built without the C crate's default features passes too:
#                    test.c then checks that the wid_remote_jwks_* functions
#                    refuse.
#   CC, CXX          compilers (default gcc, g++).
# Installs valgrind with apt-get when it is missing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

CC="${CC:-gcc}"
CXX="${CXX:-g++}"

# shellcheck source=lib.sh
source "$root/scripts/lib.sh"
wid_find_lib c-tests
lib_dir="$WID_LIB"
inc_dir="$WID_INC"
command -v valgrind >/dev/null 2>&1 || wid_apt_install valgrind

work="$(mktemp -d "${TMPDIR:-/tmp}/wid-c-tests.XXXXXX")"
trap 'rm -rf "$work"' EXIT

cflags=(-std=c11 -Wall -Wextra -Werror -pedantic -O1 -g)
cxxflags=(-std=c++17 -Wall -Wextra -Werror -pedantic)
static_libs=("$lib_dir/libworkload_identity.a" -lpthread -ldl -lm)

# The header on its own, as C11 and as C++17.
printf '#include "workload_identity.h"\n' >"$work/header.c"
cp "$work/header.c" "$work/header.cpp"
"$CC" "${cflags[@]}" -I"$inc_dir" -c "$work/header.c" -o "$work/header_c.o"
"$CXX" "${cxxflags[@]}" -I"$inc_dir" -c "$work/header.cpp" -o "$work/header_cpp.o"
echo "c-tests: header compiles as C11 and C++17"

# Both programs, statically linked.
"$CC" "${cflags[@]}" -I"$inc_dir" bindings/c/example.c "${static_libs[@]}" -o "$work/example"
"$CC" "${cflags[@]}" -I"$inc_dir" bindings/c/test.c "${static_libs[@]}" -o "$work/test_static"
"$CC" "${cflags[@]}" -I"$inc_dir" bindings/c/identity_manager.c "${static_libs[@]}" \
    -o "$work/identity_manager"
# The test program, dynamically linked (it asks for the SONAME, .so.<abi>,
# found through the recorded run-time path: no LD_LIBRARY_PATH).
"$CC" "${cflags[@]}" -I"$inc_dir" bindings/c/test.c -L"$lib_dir" -lworkload_identity -lpthread \
    -Wl,-rpath,"$lib_dir" -o "$work/test_dynamic"
echo "c-tests: compiled example and test (static and dynamic) with -Wall -Wextra -Werror -pedantic"

vg=(valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite
    --show-leak-kinds=definite)

echo "c-tests: example under valgrind"
if ! "${vg[@]}" "$work/example" >"$work/example.out"; then
    cat "$work/example.out"
    echo "c-tests: FAIL: the example failed (or valgrind found errors)" >&2
    exit 1
fi
sed 's/^/  | /' "$work/example.out" | cut -c1-160

# docs/c.md's identity manager: start, a restart, restore (the saved secret
# confirmed, not derived again), under valgrind.
echo "c-tests: identity manager example under valgrind"
mkdir "$work/state"
if ! "${vg[@]}" "$work/identity_manager" "$work/state" >"$work/im.out"; then
    cat "$work/im.out"
    echo "c-tests: FAIL: the identity manager example failed (or valgrind found errors)" >&2
    exit 1
fi
sed 's/^/  | /' "$work/im.out"
expected_im="$(cat <<'EXPECTED'
token server/vault_default, initial
secret server/secrets, initial
next tick at +600000 ms
token server/vault_default, restored
secret server/secrets, restored
restore: {"reason":"","rederived":[],"reused":true}
the workload's secret is 23 bytes
EXPECTED
)"
if [ "$(cat "$work/im.out")" != "$expected_im" ]; then
    echo "c-tests: FAIL: the identity manager example printed something else; expected:" >&2
    echo "$expected_im" >&2
    exit 1
fi

echo "c-tests: test program (static) under valgrind"
"${vg[@]}" "$work/test_static" | tee "$work/static.out"

echo "c-tests: test program (dynamic) without valgrind"
# ldd's output is captured before grep reads it: with pipefail, `ldd | grep -q` fails
# whenever grep exits before ldd has written everything (SIGPIPE), which made this
# check fail intermittently on a correctly linked program.
if command -v ldd >/dev/null 2>&1; then
    deps="$(env -u LD_LIBRARY_PATH ldd "$work/test_dynamic")"
else
    deps=libworkload_identity.so
fi
if [[ "$deps" != *"libworkload_identity.so.$(wid_abi_version) => $lib_dir/"* ]]; then
    echo "c-tests: FAIL: test_dynamic does not load $lib_dir/libworkload_identity.so.$(wid_abi_version):" >&2
    echo "$deps" >&2
    exit 1
fi
env -u LD_LIBRARY_PATH "$work/test_dynamic" | tee "$work/dynamic.out"

echo "c-tests: OK: header (C11, C++17), example and $(tail -n1 "$work/static.out" | sed 's/^c tests: //') under valgrind (static), dynamic run passed"
