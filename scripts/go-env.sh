#!/usr/bin/env bash
# go-env.sh -- source me (do not execute): `source scripts/go-env.sh`
#
# Prepares a GOPATH-mode Go toolchain for the Go interop checks, using only
# Debian-packaged Go libraries (no module proxy / network fetches by `go`):
#   - installs golang-go, go-msgpack and go-jose from apt if anything is missing
#   - exports GO111MODULE=off, GOFLAGS= (empty), GOPATH=<tmp>:/usr/share/gocode
#     and GOCACHE (under the same temp area) unless GOCACHE is already set.

_goenv_gocode=/usr/share/gocode
_goenv_msgpack_dir="$_goenv_gocode/src/github.com/hashicorp/go-msgpack/codec"
_goenv_jose_dir="$_goenv_gocode/src/gopkg.in/square/go-jose.v2"

if ! command -v go >/dev/null 2>&1 || [ ! -d "$_goenv_msgpack_dir" ] || [ ! -d "$_goenv_jose_dir" ]; then
    _goenv_sudo=""
    if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null 2>&1; then
        _goenv_sudo="sudo"
    fi
    echo "go-env.sh: installing Debian Go packages" >&2
    $_goenv_sudo apt-get update &&
        $_goenv_sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y \
            golang-go golang-github-hashicorp-go-msgpack-dev golang-gopkg-square-go-jose.v2-dev ||
        echo "go-env.sh: warning: apt-get install failed" >&2
    unset _goenv_sudo
fi

_goenv_tmp="${TMPDIR:-/tmp}"
_goenv_tmp="${_goenv_tmp%/}/workload-identity-go-$(id -u)"
mkdir -p "$_goenv_tmp/gopath" "$_goenv_tmp/cache"

export GO111MODULE=off
export GOFLAGS=
export GOPATH="$_goenv_tmp/gopath:$_goenv_gocode"
if [ -z "${GOCACHE:-}" ]; then
    export GOCACHE="$_goenv_tmp/cache"
fi

unset _goenv_gocode _goenv_msgpack_dir _goenv_jose_dir _goenv_tmp
