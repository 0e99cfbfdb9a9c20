#!/usr/bin/env bash
# go-env.sh -- source me (do not execute): `source scripts/go-env.sh`
#
# Defines `wid_go`, which runs the Debian Go toolchain in GOPATH mode for this
# checkout: GO111MODULE=off, GOFLAGS empty, GOPATH=<checkout>/target/go/gopath
# followed by /usr/share/gocode (Debian's Go libraries), GOCACHE under
# <checkout>/target/go/cache. Nothing is exported: your shell's own Go settings
# (modules, GOPATH, GOFLAGS) stay as they were, and two checkouts never share
# a GOPATH. It installs nothing either: run scripts/go-deps.sh for the Debian
# packages (golang-go, go-msgpack, go-jose).
#
# Also sets (not exported) WID_GOPATH, whose first entry is where packages are
# linked (`$WID_GOPATH_FIRST/src/workload-identity/wid`).

_goenv_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WID_GOPATH_FIRST="$_goenv_root/target/go/gopath"
WID_GOPATH="$WID_GOPATH_FIRST:/usr/share/gocode"
WID_GOCACHE="${GOCACHE:-$_goenv_root/target/go/cache}"
mkdir -p "$WID_GOPATH_FIRST/src" "$WID_GOCACHE"
unset _goenv_root

if ! command -v go >/dev/null 2>&1 || [ ! -d /usr/share/gocode/src/github.com/hashicorp/go-msgpack/codec ]; then
    echo "go-env.sh: Debian Go packages missing: run scripts/go-deps.sh" >&2
fi

# Runs go with this checkout's GOPATH-mode settings, for this command only.
wid_go() {
    env GO111MODULE=off GOFLAGS= GOPATH="$WID_GOPATH" GOCACHE="$WID_GOCACHE" go "$@"
}
