#!/usr/bin/env bash
# go-packaging-check.sh -- what a Go user meets before any test runs:
#   1. sourcing scripts/go-env.sh installs nothing, exports nothing (no
#      GO111MODULE=off leaking into the user's shell) and gives each checkout
#      its own GOPATH;
#   2. the binding builds in module mode from bindings/go/go.mod through a
#      replace directive, offline, in a scratch module outside the repository.
# Needs the release static library (cargo build --release) and Debian Go.
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

# --- 2. module mode -----------------------------------------------------------
# shellcheck source=lib.sh
source "$REPO_ROOT/scripts/lib.sh"
lib="$(wid_target_dir)/release/libworkload_identity.a"
[ -f "$lib" ] || { echo "go-packaging-check: missing $lib (cargo build --release)" >&2; exit 1; }
mkdir -p "$work/plugin"
cat > "$work/plugin/go.mod" <<MOD
module example.com/plugin

go 1.19

require workload-identity v0.0.0

replace workload-identity => $REPO_ROOT/bindings/go

// Offline here: Debian's copy of Nomad's codec (a real build gets it from the proxy).
replace github.com/hashicorp/go-msgpack => /usr/share/gocode/src/github.com/hashicorp/go-msgpack
MOD
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
	if _, err := kr.Rotate(1700000000); err != nil {
		panic(err)
	}
	req := &wid.IssueRequest{Region: "global",
		Allocation: &wid.Allocation{ID: "a1", Namespace: "default", JobID: "web", TaskGroup: "g"},
		Task:       "server",
		Identity:   &wid.WorkloadIdentity{Name: "default", Audience: []string{"vault.io"}, TTL: time.Hour}}
	tok, err := kr.Issue(req, 1700000000)
	if err != nil {
		panic(err)
	}
	fmt.Printf("module mode: library %s issued a %d-byte token\n", wid.Version(), len(tok))
}
GO
(cd "$work/plugin" &&
    env GO111MODULE=on GOFLAGS=-mod=mod GOPROXY=off GOPATH="$work/gopath" GOCACHE="$work/cache" \
        CGO_ENABLED=1 CGO_CFLAGS="-I$REPO_ROOT/include" CGO_LDFLAGS="$lib -lpthread -ldl -lm" \
        go run .)
