#!/usr/bin/env bash
# go-packaging-check.sh -- what a Go user meets before any test runs, done as
# bindings/go/README.md's marked blocks say (they are run as written, paths
# substituted, so the recipe and this check cannot drift apart):
#   1. go-module:add -- an empty module outside the checkout adds the binding
#      (go get with a replace to the checkout until it is published); go mod
#      tidy fetches its one dependency, go-msgpack/v2, through the module
#      proxy into a scratch module cache and writes go.sum;
#   2. go-module:build -- that plugin built with -tags wid_pkgconfig against a
#      scripts/install.sh prefix, no cgo flags, run without LD_LIBRARY_PATH;
#      the same module built without the tag and without CGO_CFLAGS /
#      CGO_LDFLAGS, which must fail with a message naming both
#      (bindings/go/wid/wid_header.h), not only "No such file or directory";
#   3. go-module:self -- the binding's own `go test ./wid` from a copy of the
#      checkout's Go files.
# and docs/go.md's blocks marked `run by scripts/go-packaging-check.sh: NAME`
# (or `checked by`), as printed, paths substituted:
#   install, add, build -- scripts/install.sh into a scratch /opt/wid, then
#      1 and 2 again in a second new module, as that page writes them;
#   untagged -- the error it quotes is what the untagged build printed;
#   checkout -- `go test ./wid` against the build tree's archive, from the
#      copy of 3.
# Needs the C library (WID_LIB_DIR: an installed or staged lib directory, as
# go-tests.sh passes; else the checkout's, staged by scripts/lib.sh), cargo
# (docs/go.md's install block builds the checkout's library first: nothing
# to do after its release build), the machine's Go, pkg-config, and the Go
# module proxy.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
# shellcheck source=lib.sh
source "$REPO_ROOT/scripts/lib.sh"
wid_go_setup go-packaging-check
work="$(mktemp -d "${TMPDIR:-/tmp}/wid-go-packaging.XXXXXX")"
# The scratch module cache is read-only to its owner (Go's choice): make it
# writable so it can be removed.
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

readme="$REPO_ROOT/bindings/go/README.md"
block() {
    awk -v m="<!-- go-module:$1 -->" '
        $0 == m { armed = 1; next }
        armed && /^```/ { if (inside) exit; inside = 1; next }
        inside { print }
    ' "$readme"
}
for name in add build self; do
    [ -n "$(block "$name")" ] || { echo "go-packaging-check: $readme lost its go-module:$name block" >&2; exit 1; }
done
godoc="$REPO_ROOT/docs/go.md"
go_doc_block() {
    awk -v run="<!-- run by scripts/go-packaging-check.sh: $1 -->" \
        -v checked="<!-- checked by scripts/go-packaging-check.sh: $1 -->" '
        $0 == run || $0 == checked { armed = 1; next }
        armed && /^```/ { if (inside) exit; inside = 1; next }
        inside { print }
    ' "$godoc"
}
for name in install add build untagged checkout; do
    [ -n "$(go_doc_block "$name")" ] || { echo "go-packaging-check: docs/go.md lost its $name block" >&2; exit 1; }
done
module_path="$(sed -n 's/^module //p' "$REPO_ROOT/bindings/go/go.mod")"
block add | grep -qF "$module_path" ||
    { echo "go-packaging-check: the go-module:add block does not name the module path $module_path (bindings/go/go.mod)" >&2; exit 1; }

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
# The blocks are pasted into shell text as they are written.
case "$REPO_ROOT$work$libdir" in
    *[[:space:]\&\|]*) echo "go-packaging-check: a path holds a space, & or |: $REPO_ROOT, $work, $libdir" >&2; exit 1 ;;
esac
# The self block links <target dir>/release/libworkload_identity_ffi.a, as
# cargo names it: a scratch target dir holding that name.
mkdir -p "$work/target/release"
ln -s "$libdir/libworkload_identity.a" "$work/target/release/libworkload_identity_ffi.a"

# A Go user's settings: none of this checkout's (no -mod=readonly: the
# plugin's own go.mod is edited), a scratch GOPATH and module cache (every
# module comes from the proxy), the machine's build cache, GOENV=off (no
# `go env -w` settings either), the machine's GOPROXY.
goenv=(env -u LD_LIBRARY_PATH -u CGO_CFLAGS -u CGO_LDFLAGS -u GOFLAGS -u GOWORK -u PKG_CONFIG_PATH
    GOENV=off GO111MODULE=on GOTOOLCHAIN=local GOPROXY="$(go env GOPROXY)" GOSUMDB="$(go env GOSUMDB)"
    GOPATH="$work/gopath" GOMODCACHE="$work/modcache" GOCACHE="$(go env GOCACHE)" CGO_ENABLED=1)

# --- 1. an empty module adds the binding -------------------------------------
prefix="$work/prefix"
"$REPO_ROOT/scripts/install.sh" --no-build --from "$libdir" --prefix "$prefix" >/dev/null 2>"$work/install.err" ||
    { cat "$work/install.err" >&2; exit 1; }
mkdir -p "$work/plugin"
plugin_main() {
    cat <<GO
package main

import (
	"fmt"
	"time"

	"$module_path/wid"
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
}
plugin_main > "$work/plugin/main.go"
block add | sed "s|/path/to/workload-identity|$REPO_ROOT|g" > "$work/add.sh"
(cd "$work/plugin" && "${goenv[@]}" bash -euo pipefail "$work/add.sh") > "$work/add.out" 2>&1 ||
    { cat "$work/add.out" >&2; echo "go-packaging-check: the README's go-module:add block failed; it ran:" >&2; cat "$work/add.sh" >&2; exit 1; }
grep -q "^github.com/hashicorp/go-msgpack/v2 " "$work/plugin/go.sum" ||
    { echo "go-packaging-check: the plugin's go.sum has no go-msgpack/v2 line:" >&2; cat "$work/plugin/go.sum" >&2; exit 1; }
if grep -Eq 'go-jose|go-oidc|go-spiffe|x/crypto' "$work/plugin/go.sum"; then
    echo "go-packaging-check: the plugin's module graph names an interop-only module:" >&2
    cat "$work/plugin/go.sum" >&2
    exit 1
fi
echo "go-packaging-check: an empty module added $module_path (go.mod: $(grep -c . "$work/plugin/go.mod") lines; go.sum: $(cut -d' ' -f1 "$work/plugin/go.sum" | sort -u | tr '\n' ' '))"

# --- 2. built with pkg-config, run without LD_LIBRARY_PATH -------------------
block build | sed "s|/opt/wid|$prefix|g" > "$work/build.sh"
(cd "$work/plugin" && "${goenv[@]}" bash -euo pipefail "$work/build.sh") > "$work/plugin.out" ||
    { echo "go-packaging-check: the README's go-module:build block failed; it ran:" >&2; cat "$work/build.sh" >&2; exit 1; }
grep -q "^module mode: library .* issued a" "$work/plugin.out" ||
    { echo "go-packaging-check: the plugin printed: $(cat "$work/plugin.out")" >&2; exit 1; }
# It really is the shared library, found through the recorded path alone.
soname="libworkload_identity.so.$(wid_abi_version)"
deps="$(env -u LD_LIBRARY_PATH ldd "$work/plugin/plugin")"
grep -q "$soname => $prefix/lib/" <<<"$deps" ||
    { echo "go-packaging-check: the plugin does not load $prefix/lib/$soname:" >&2; echo "$deps" >&2; exit 1; }
echo "go-packaging-check: $(cat "$work/plugin.out") (-tags wid_pkgconfig, no cgo flags, no LD_LIBRARY_PATH)"

# The same plugin without -tags wid_pkgconfig and without CGO_CFLAGS /
# CGO_LDFLAGS: the build fails, and its message names both ways (not only
# "workload_identity.h: No such file or directory").
if (cd "$work/plugin" && "${goenv[@]}" go build -o plugin-untagged .) > "$work/untagged.out" 2>&1; then
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
# docs/go.md quotes that message: it is the compiler's, word for word.
quoted="$(go_doc_block untagged)"
grep -qF -- "$quoted" "$work/untagged.out" || {
    cat "$work/untagged.out" >&2
    echo "go-packaging-check: docs/go.md's untagged block is not what the build printed: $quoted" >&2
    exit 1
}

# --- docs/go.md: install, add, build, in a second new module ------------------
# Its install block builds first (cargo has nothing to do after the release
# build) and installs into /opt/wid: a scratch prefix here. It runs in the
# caller's environment, as cargo's other builds do (PKG_CONFIG_PATH
# included: cargo rebuilds aws-lc-sys when it changes).
docprefix="$work/opt-wid"
go_doc_block install | sed "s|/opt/wid|$docprefix|g" > "$work/doc-install.sh"
(cd "$REPO_ROOT" && bash -euo pipefail "$work/doc-install.sh") > "$work/doc-install.out" 2>&1 ||
    { cat "$work/doc-install.out" >&2; echo "go-packaging-check: docs/go.md's install block failed; it ran:" >&2; cat "$work/doc-install.sh" >&2; exit 1; }
[ -f "$docprefix/lib/pkgconfig/workload_identity.pc" ] ||
    { echo "go-packaging-check: docs/go.md's install block installed no $docprefix/lib/pkgconfig/workload_identity.pc" >&2; exit 1; }
# "from your module": a new one, with the same plugin.
mkdir -p "$work/plugin-docs"
(cd "$work/plugin-docs" && "${goenv[@]}" go mod init example.com/plugin) > "$work/doc-init.out" 2>&1 ||
    { cat "$work/doc-init.out" >&2; exit 1; }
plugin_main > "$work/plugin-docs/main.go"
go_doc_block add | sed "s|/path/to/workload-identity|$REPO_ROOT|g" > "$work/doc-add.sh"
(cd "$work/plugin-docs" && "${goenv[@]}" bash -euo pipefail "$work/doc-add.sh") > "$work/doc-add.out" 2>&1 ||
    { cat "$work/doc-add.out" >&2; echo "go-packaging-check: docs/go.md's add block failed; it ran:" >&2; cat "$work/doc-add.sh" >&2; exit 1; }
grep -q "^github.com/hashicorp/go-msgpack/v2 " "$work/plugin-docs/go.sum" ||
    { echo "go-packaging-check: after docs/go.md's add block the module's go.sum has no go-msgpack/v2 line:" >&2; cat "$work/plugin-docs/go.sum" >&2; exit 1; }
go_doc_block build | sed "s|/opt/wid|$docprefix|g" > "$work/doc-build.sh"
(cd "$work/plugin-docs" && "${goenv[@]}" bash -euo pipefail "$work/doc-build.sh") > "$work/doc-plugin.out" ||
    { echo "go-packaging-check: docs/go.md's build block failed; it ran:" >&2; cat "$work/doc-build.sh" >&2; exit 1; }
grep -q "^module mode: library .* issued a" "$work/doc-plugin.out" ||
    { echo "go-packaging-check: docs/go.md's plugin printed: $(cat "$work/doc-plugin.out")" >&2; exit 1; }
deps="$(env -u LD_LIBRARY_PATH ldd "$work/plugin-docs/plugin")"
grep -q "$soname => $docprefix/lib/" <<<"$deps" ||
    { echo "go-packaging-check: docs/go.md's plugin does not load $docprefix/lib/$soname:" >&2; echo "$deps" >&2; exit 1; }
echo "go-packaging-check: docs/go.md's install, add and build blocks, as printed: $(cat "$work/doc-plugin.out")"

# --- 3. the binding's own tests, as the README says ---------------------------
# A copy of the checkout's Go files (the tests read the committed vectors and
# docs/go.md), so nothing is written into the checkout CI runs from.
copy="$work/checkout"
mkdir -p "$copy/bindings" "$copy/tests/vectors" "$copy/docs" "$copy/ffi"
cp "$REPO_ROOT/docs/go.md" "$copy/docs/"   # its manager example is checked by a test
cp -R "$REPO_ROOT/bindings/go" "$copy/bindings/go"
cp -R "$REPO_ROOT/include" "$copy/include"
cp -R "$REPO_ROOT/tests/vectors/msgpack" "$REPO_ROOT/tests/vectors/msgpack-v2" "$copy/tests/vectors/"
ln -s "$work/target" "$copy/target"
block self > "$work/self.sh"
(cd "$copy" && "${goenv[@]}" CARGO_TARGET_DIR="$work/target" bash -euo pipefail "$work/self.sh") > "$work/self.out" 2>&1 ||
    { cat "$work/self.out" >&2; echo "go-packaging-check: go test ./wid in module mode failed" >&2; exit 1; }
grep -Eq "^ok[[:space:]]+$module_path/wid" "$work/self.out" ||
    { cat "$work/self.out" >&2; echo "go-packaging-check: no 'ok $module_path/wid' from go test" >&2; exit 1; }
if ! diff -q "$REPO_ROOT/bindings/go/go.mod" "$copy/bindings/go/go.mod" >/dev/null ||
    ! diff -q "$REPO_ROOT/bindings/go/go.sum" "$copy/bindings/go/go.sum" >/dev/null; then
    echo "go-packaging-check: go test ./wid edited the binding's go.mod or go.sum" >&2
    exit 1
fi
echo "go-packaging-check: module mode: $(grep "^ok" "$work/self.out")"

# docs/go.md's checkout block, from the same copy: the build tree's archive
# (the scratch target dir's) with the page's cgo flags.
go_doc_block checkout > "$work/doc-checkout.sh"
(cd "$copy" && "${goenv[@]}" CARGO_TARGET_DIR="$work/target" bash -euo pipefail "$work/doc-checkout.sh") > "$work/doc-checkout.out" 2>&1 ||
    { cat "$work/doc-checkout.out" >&2; echo "go-packaging-check: docs/go.md's checkout block failed; it ran:" >&2; cat "$work/doc-checkout.sh" >&2; exit 1; }
grep -Eq "^ok[[:space:]]+$module_path/wid" "$work/doc-checkout.out" ||
    { cat "$work/doc-checkout.out" >&2; echo "go-packaging-check: no 'ok $module_path/wid' from docs/go.md's checkout block" >&2; exit 1; }
echo "go-packaging-check: docs/go.md's checkout block: $(grep "^ok" "$work/doc-checkout.out")"
