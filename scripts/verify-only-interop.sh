#!/usr/bin/env bash
# verify-only-interop.sh -- the verify-only algorithms (ES384, ES512, PS256,
# PS384, PS512, RS384, RS512) against two independent JOSE stacks, with fresh
# keys and tokens on every run:
#
#   1. PyJWT (tests/python/verify_only_vectors.py) and go-jose v4
#      (tests/go/verifyonly, module tests/go.mod) each write a JWKS, one token
#      per algorithm, and near misses with the result code each must get;
#   2. tests/verify_only_algorithms.rs reads them (WID_VERIFY_ONLY_VECTORS)
#      instead of the committed copies in tests/vectors/verify_only/.
#
#   scripts/verify-only-interop.sh          # check
#   scripts/verify-only-interop.sh regen    # rewrite the committed vectors
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
cd "$REPO_ROOT"

if ! python3 -c 'import jwt, cryptography' >/dev/null 2>&1; then
    echo "verify-only-interop.sh: installing PyJWT and cryptography from PyPI" >&2
    python3 -m pip install --quiet "PyJWT[crypto]" cryptography
fi
# shellcheck source=lib.sh
source "$SCRIPT_DIR/lib.sh"
wid_go_setup verify-only-interop.sh

case "${1:-check}" in
regen)
    out="$REPO_ROOT/tests/vectors/verify_only"
    ;;
check)
    out="$(mktemp -d "${TMPDIR:-/tmp}/verify-only.XXXXXX")"
    trap 'rm -rf "$out"' EXIT
    ;;
*)
    echo "usage: $0 [check|regen]" >&2
    exit 2
    ;;
esac

python3 tests/python/verify_only_vectors.py "$out/pyjwt.json"
(cd tests && go run ./go/verifyonly "$out/gojose.json")

if WID_VERIFY_ONLY_VECTORS="$out" cargo test --locked --quiet --test verify_only_algorithms; then
    echo "verify-only-interop.sh: PASS (PyJWT and go-jose, fresh keys)"
else
    status=$?
    echo "verify-only-interop.sh: FAIL (exit $status; vectors in $out)" >&2
    trap - EXIT
    exit "$status"
fi
