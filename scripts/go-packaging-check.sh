#!/usr/bin/env bash
# go-packaging-check.sh -- what a Go user meets before any test runs:
#   1. sourcing scripts/go-env.sh installs nothing, exports nothing (no
#      GO111MODULE=off leaking into the user's shell) and gives each checkout
#      its own GOPATH;
#   2. module mode, offline, exactly as bindings/go/README.md's marked blocks
#      say: a plugin module (replace directives) built with -tags
#      wid_pkgconfig against a scripts/install.sh prefix and run without
#      LD_LIBRARY_PATH; the same module built without the tag and without
#      CGO_CFLAGS/CGO_LDFLAGS, which must fail with a message naming both
#      (bindings/go/wid/wid_header.h), not only "No such file or directory";
#      and the binding's own `go test ./wid` through the go.work
#      scripts/go-work.sh writes.
# Needs the C library (WID_LIB_DIR: an installed or staged lib directory, as
# go-tests.sh passes; else the checkout's, staged by scripts/lib.sh), Debian
# Go, pkg-config.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# --- 1. go-env.sh hygiene ---------------------------------------------------
# A fake apt-get/sudo first on PATH records any install attempt.
mkdir -p "$work/bin"
for tool in apt-get sudo; do
    printf '#!/bin/sh\necho "%s $*" >> "%s/installs"\nexit 1\n' "$tool" "$work" > "$work/bin/$tool"
    chmod +x "$work/bin/$tool"
done
env -i HOME="$work" PATH="$work/bin:/usr/bin:/bin" bash --noprofile --norc -c '
    set -eu
    source "$1/scripts/go-env.sh" 2>/dev/null
    for v in GO111MODULE GOPATH GOFLAGS GOCACHE WID_GOPATH; do
        if env | grep -q "^$v="; then
            echo "go-env.sh exported $v into the shell" >&2
            exit 1
        fi
    done
    case "$WID_GOPATH" in
        "$1"/target/go/gopath:*) ;;
        *) echo "go-env.sh: GOPATH $WID_GOPATH is not under this checkout" >&2; exit 1 ;;
    esac
    # GOPATH mode holds for wid_go itself, and only there.
    [ "$(wid_go env GO111MODULE)" = off ] || { echo "wid_go is not in GOPATH mode" >&2; exit 1; }
' _ "$REPO_ROOT"
if [ -s "$work/installs" ]; then
    echo "go-packaging-check: sourcing go-env.sh tried to install packages:" >&2
    cat "$work/installs" >&2
    exit 1
fi
# A second checkout (a copy of the script tree) gets its own GOPATH.
mkdir -p "$work/other/scripts"
cp "$REPO_ROOT/scripts/go-env.sh" "$work/other/scripts/"
other="$(bash -c 'source "$1/scripts/go-env.sh" 2>/dev/null; echo "$WID_GOPATH"' _ "$work/other")"
mine="$(bash -c 'source "$1/scripts/go-env.sh" 2>/dev/null; echo "$WID_GOPATH"' _ "$REPO_ROOT")"
if [ "$other" = "$mine" ]; then
    echo "go-packaging-check: two checkouts share GOPATH $mine" >&2
    exit 1
fi
echo "go-packaging-check: go-env.sh installs nothing, exports nothing, GOPATH per checkout"

# --- 2. module mode, as bindings/go/README.md writes it ----------------------
# The README's marked blocks are run as written (paths substituted), so the
# recipe and this check cannot drift apart.
readme="$REPO_ROOT/bindings/go/README.md"
block() {
    awk -v m="<!-- go-module:$1 -->" '
        $0 == m { armed = 1; next }
        armed && /^```/ { if (inside) exit; inside = 1; next }
        inside { print }
    ' "$readme"
}
for name in go.mod offline build self; do
    [ -n "$(block "$name")" ] || { echo "go-packaging-check: $readme lost its go-module:$name block" >&2; exit 1; }
done

# shellcheck source=lib.sh
source "$REPO_ROOT/scripts/lib.sh"
command -v pkg-config >/dev/null 2>&1 || wid_apt_install pkg-config
# The libraries go-tests.sh used (WID_LIB_DIR), else this checkout's, staged.
if [ -n "${WID_LIB_DIR:-}" ]; then
    libdir="$WID_LIB_DIR"
else
    wid_stage_lib go-packaging-check
    libdir="$WID_LIB"
fi
[ -f "$libdir/libworkload_identity.a" ] && [ -f "$libdir/libworkload_identity.so" ] ||
    { echo "go-packaging-check: missing $libdir/libworkload_identity.{a,so} (cargo build --release --locked -p workload-identity-ffi, or WID_LIB_DIR)" >&2; exit 1; }
libdir="$(cd "$libdir" && pwd)"
# The blocks are pasted into go.mod and shell text as they are written.
case "$REPO_ROOT$work$libdir" in
    *[[:space:]\&\|]*) echo "go-packaging-check: a path holds a space, & or |: $REPO_ROOT, $work, $libdir" >&2; exit 1 ;;
esac
# The self block links <target dir>/release/libworkload_identity_ffi.a, as
# cargo names it: a scratch target dir holding that name.
mkdir -p "$work/target/release"
ln -s "$libdir/libworkload_identity.a" "$work/target/release/libworkload_identity_ffi.a"

# Go's own settings for the runs below: scratch caches, nothing inherited
# (GOENV=off: no `go env -w` settings either).
goenv=(env -u LD_LIBRARY_PATH -u CGO_CFLAGS -u CGO_LDFLAGS -u GOFLAGS -u GOWORK -u PKG_CONFIG_PATH
    GOENV=off GO111MODULE=on GOPROXY=off GOPATH="$work/gopath" GOCACHE="$work/cache" CGO_ENABLED=1)

# 2a. A plugin module: the README's go.mod and offline replace, the library
# installed by scripts/install.sh, built with -tags wid_pkgconfig and no cgo
# flags, run without LD_LIBRARY_PATH.
prefix="$work/prefix"
"$REPO_ROOT/scripts/install.sh" --no-build --from "$libdir" --prefix "$prefix" >/dev/null 2>"$work/install.err" ||
    { cat "$work/install.err" >&2; exit 1; }
mkdir -p "$work/plugin"
{ block go.mod | sed "s|/path/to/workload-identity|$REPO_ROOT|"; echo; block offline; } > "$work/plugin/go.mod"
cat > "$work/plugin/main.go" <<'GO'
package main

import (
	"fmt"
	"time"

	"workload-identity/wid"
)

func main() {
	kr, err := wid.NewKeyring()
	if err != nil {
		panic(err)
	}
	defer kr.Close()
	now := time.Now()
	if _, err := kr.Rotate(now); err != nil {
		panic(err)
	}
	req := &wid.IssueRequest{Region: "global",
		Allocation: &wid.Allocation{ID: "a1", Namespace: "default", JobID: "web", TaskGroup: "g"},
		Task:       "server",
		Identity:   &wid.WorkloadIdentity{Name: "default", Audience: []string{"vault.io"}, TTL: time.Hour}}
	tok, err := kr.Issue(req, now)
	if err != nil {
		panic(err)
	}
	fmt.Printf("module mode: library %s issued a %d-byte token\n", wid.Version(), len(tok))
}
GO
block build | sed "s|/opt/wid|$prefix|g" > "$work/build.sh"
(cd "$work/plugin" && "${goenv[@]}" bash -euo pipefail "$work/build.sh") > "$work/plugin.out" ||
    { echo "go-packaging-check: the README's module recipe failed; it ran:" >&2; cat "$work/build.sh" >&2; exit 1; }
grep -q "^module mode: library .* issued a" "$work/plugin.out" ||
    { echo "go-packaging-check: the plugin printed: $(cat "$work/plugin.out")" >&2; exit 1; }
# It really is the shared library, found through the recorded path alone.
soname="libworkload_identity.so.$(wid_abi_version)"
deps="$(env -u LD_LIBRARY_PATH ldd "$work/plugin/plugin")"
grep -q "$soname => $prefix/lib/" <<<"$deps" ||
    { echo "go-packaging-check: the plugin does not load $prefix/lib/$soname:" >&2; echo "$deps" >&2; exit 1; }
echo "go-packaging-check: $(cat "$work/plugin.out") (-tags wid_pkgconfig, no cgo flags, no LD_LIBRARY_PATH)"

# 2a'. The same plugin without -tags wid_pkgconfig and without CGO_CFLAGS /
# CGO_LDFLAGS: the build fails, and its message names both ways (not only
# "workload_identity.h: No such file or directory").
if (cd "$work/plugin" && "${goenv[@]}" GOFLAGS=-mod=mod go build -o plugin-untagged .) > "$work/untagged.out" 2>&1; then
    echo "go-packaging-check: the plugin built without -tags wid_pkgconfig and without cgo flags" >&2
    exit 1
fi
for want in "workload_identity.h not found" "-tags wid_pkgconfig" "PKG_CONFIG_PATH" "CGO_CFLAGS" "CGO_LDFLAGS" "docs/go.md"; do
    grep -qF -- "$want" "$work/untagged.out" || {
        cat "$work/untagged.out" >&2
        echo "go-packaging-check: building without -tags wid_pkgconfig or cgo flags does not say \"$want\"" >&2
        exit 1
    }
done
if grep -q "No such file or directory" "$work/untagged.out"; then
    cat "$work/untagged.out" >&2
    echo "go-packaging-check: building without the header still says only \"No such file or directory\"" >&2
    exit 1
fi
echo "go-packaging-check: without -tags wid_pkgconfig or cgo flags the build fails naming both"

# 2b. The binding's own tests in module mode, offline: the README's block in a
# copy of the checkout's Go files (go-work.sh writes go.work there, never in
# the checkout CI runs from).
copy="$work/checkout"
mkdir -p "$copy/scripts" "$copy/bindings" "$copy/tests/vectors" "$copy/docs" "$copy/ffi"
cp "$REPO_ROOT/scripts/go-work.sh" "$copy/scripts/"
cp "$REPO_ROOT/docs/go.md" "$copy/docs/"   # its manager example is checked by a test
cp -R "$REPO_ROOT/bindings/go" "$copy/bindings/go"
rm -f "$copy/bindings/go/go.work" "$copy/bindings/go/go.work.sum"
cp -R "$REPO_ROOT/ffi/include" "$copy/ffi/include"
cp -R "$REPO_ROOT/tests/vectors/msgpack" "$copy/tests/vectors/msgpack"
ln -s "$work/target" "$copy/target"
block self > "$work/self.sh"
(cd "$copy" && "${goenv[@]}" CARGO_TARGET_DIR="$work/target" bash -euo pipefail "$work/self.sh") > "$work/self.out" 2>&1 ||
    { cat "$work/self.out" >&2; echo "go-packaging-check: go test ./wid in module mode failed" >&2; exit 1; }
grep -Eq "^ok[[:space:]]+workload-identity/wid" "$work/self.out" ||
    { cat "$work/self.out" >&2; echo "go-packaging-check: no 'ok workload-identity/wid' from go test" >&2; exit 1; }
echo "go-packaging-check: module mode: $(grep "^ok" "$work/self.out")"
