#!/usr/bin/env bash
# c-install-check.sh -- the installed C library works as C users expect: the
# shared library cargo builds (libworkload_identity_ffi.so, the
# workload-identity-ffi crate) carries the versioned SONAME
# (libworkload_identity.so.<abi>), and where it is installed or staged a file
# of that name is there,
# scripts/install.sh lays out lib/, include/ and the .pc, and docs/c.md's
# recipe, run as printed, builds the example five ways (pkg-config, with the
# run-time path, --static, and from the build tree static and staged), each
# of which runs. Needs the release build and pkg-config.
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

# docs/c.md's recipe, run as printed by bash from the repository root (its
# block marked `run by scripts/c-install-check.sh: install`), with only these
# replaced: /usr/local by a scratch prefix (put on PKG_CONFIG_PATH once it is
# installed, as pkg-config searches /usr/local of itself; not before: cargo
# rebuilds aws-lc-sys when PKG_CONFIG_PATH changes), $HOME by a scratch home,
# the build tree's target/release by the target dir cargo builds into, its
# staging under target/c by a scratch directory, and each `-o example` by a
# program of its own (the last is the one it runs), so that every program
# the recipe builds is checked below. Its `scripts/install.sh` builds first:
# the release build is there, so cargo has nothing to do.
recipe="$(awk -v m="<!-- run by scripts/c-install-check.sh: install -->" '
    $0 == m { armed = 1; next }
    armed && /^```/ { if (inside) exit; inside = 1; next }
    inside { print }
' docs/c.md)"
[ -n "$recipe" ] || { echo "c-install-check: docs/c.md lost its install block" >&2; exit 1; }
grep -q '^scripts/install.sh --prefix /usr/local ' <<<"$recipe" ||
    { echo "c-install-check: docs/c.md's install block no longer starts from scripts/install.sh --prefix /usr/local" >&2; exit 1; }
case "$work$release" in
    *[[:space:]\&\|]*) echo "c-install-check: a path holds a space, & or |: $work, $release" >&2; exit 1 ;;
esac
mkdir -p "$work/home"
recipe="$(printf '%s\n' "$recipe" | sed \
    -e "s|/usr/local|$work/usr-local|g" \
    -e "s|\\\$PWD/target/c|$work/target-c|g" -e "s|target/c/|$work/target-c/|g" \
    -e "s|target/release/|$release/|g" |
    awk -v w="$work" '
        / -o example$/ { n++; sub(/ -o example$/, " -o " w "/example-" n) }
        /^\.\/example$/ { $0 = w "/example-" n }
        { print }
        /^scripts\/install\.sh --prefix / {
            print "export PKG_CONFIG_PATH=" w "/usr-local/lib/pkgconfig   # c-install-check: /usr/local stands here"
        }')"
printf '%s\n' "$recipe" > "$work/recipe.sh"
# (cargo and rustup keep their homes: they default to $HOME's.)
if ! env -u LD_LIBRARY_PATH HOME="$work/home" \
    CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}" RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}" \
    bash -euo pipefail "$work/recipe.sh" > "$work/recipe.out" 2> "$work/recipe.err"; then
    cat "$work/recipe.out" "$work/recipe.err" >&2
    echo "c-install-check: docs/c.md's recipe failed; it ran:" >&2
    cat "$work/recipe.sh" >&2
    exit 1
fi
# The compiler had nothing to say (scripts/c-tests.sh builds the example
# with -Werror; the recipe's own flags must not warn either).
if grep -q 'warning:' "$work/recipe.err"; then
    cat "$work/recipe.err" >&2
    echo "c-install-check: docs/c.md's recipe compiles with warnings" >&2
    exit 1
fi
for f in include/workload_identity.h include/wid_request.h lib/libworkload_identity.a \
    "lib/libworkload_identity.so.$abi" lib/pkgconfig/workload_identity.pc; do
    [ -e "$work/usr-local/$f" ] || { echo "c-install-check: the recipe did not install $f" >&2; exit 1; }
done
# It printed the example's output (the last program, run by the recipe).
[ -s "$work/recipe.out" ] || { echo "c-install-check: the recipe's ./example printed nothing" >&2; exit 1; }
needs() {
    readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(libworkload_identity[^]]*\)\]/\1/p'
}
# Its five programs, in the recipe's order: each needs the library it says,
# and runs where the recipe says it does.
programs=("$work"/example-*)
if [ "${#programs[@]}" != 5 ]; then
    echo "c-install-check: docs/c.md's recipe built ${#programs[@]} programs, expected 5: ${programs[*]}" >&2
    exit 1
fi
for i in 1 2 3 4 5; do
    program="$work/example-$i"
    case "$i" in
        3|4) want="" ;;                     # static: pkg-config --static; the build tree's .a
        *) want="libworkload_identity.so.$abi" ;;
    esac
    if [ "$(needs "$program")" != "$want" ]; then
        echo "c-install-check: the recipe's program $i needs '$(needs "$program")', expected '$want'" >&2
        exit 1
    fi
    runpath="$(readelf -d "$program" | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]/\2/p')"
    case "$i" in
        1) want_path="" ;;                  # found as ldconfig would find it
        2) want_path="$work/usr-local/lib" ;;   # the .pc's libdir
        5) want_path="$work/target-c/lib" ;;    # the staged build tree
        *) want_path="" ;;
    esac
    if [ "$runpath" != "$want_path" ]; then
        echo "c-install-check: the recipe's program $i records the run-time path '$runpath', expected '$want_path'" >&2
        exit 1
    fi
    if [ "$i" = 1 ]; then
        LD_LIBRARY_PATH="$work/usr-local/lib" "$program" >/dev/null
    else
        env -u LD_LIBRARY_PATH "$program" >/dev/null
    fi
done
flags="$(PKG_CONFIG_PATH="$work/usr-local/lib/pkgconfig" pkg-config --cflags --libs workload_identity)"
# The installer's own contract: --help is help (exit 0), and the build
# directory follows CARGO_TARGET_DIR as cargo does.
scripts/install.sh --help | grep -q -- '--prefix DIR'
[ "$(CARGO_TARGET_DIR="$work/elsewhere" wid_target_dir)" = "$work/elsewhere" ] || {
    echo "c-install-check: wid_target_dir ignores CARGO_TARGET_DIR" >&2
    exit 1
}
echo "c-install-check: OK: SONAME $soname; installed lib/, include/, pkgconfig; docs/c.md's recipe run as printed: its five programs built (pkg-config: $flags; --static; the build tree, static and staged) and ran"
