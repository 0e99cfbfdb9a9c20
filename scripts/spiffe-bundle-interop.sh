#!/usr/bin/env bash
# spiffe-bundle-interop.sh -- SPIFFE federation against py-spiffe
# (tests/python/spiffe_bundle_interop.py), both directions, fresh keys on
# every run:
#
#   1. endpoint: py-spiffe parses `wid serve`'s /spiffe/bundle.json
#      (JwtBundle.parse) and validates our JWT-SVIDs with it; the sequence
#      rises after a rotation;
#   2. write: py-spiffe builds a JwtBundle of fresh keys, which is dumped as a
#      SPIFFE bundle with JWT-SVIDs PyJWT signed; tests/remote_jwks.rs
#      (spiffe_bundle_written_by_py_spiffe) reads it with SpiffeBundleSource
#      over loopback HTTP (WID_PY_SPIFFE_BUNDLE) and verifies the tokens.
#
#   scripts/spiffe-bundle-interop.sh          # check (builds wid)
#   scripts/spiffe-bundle-interop.sh regen    # rewrite tests/vectors/spiffe_bundle/
#   WID_BIN=/path/to/wid scripts/spiffe-bundle-interop.sh
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

# py-spiffe pinned as in profiles-interop.sh.
if ! python3 -c 'import jwt, cryptography, importlib.metadata as m; assert m.version("spiffe") == "0.3.2"' >/dev/null 2>&1; then
    echo "spiffe-bundle-interop.sh: installing PyJWT, cryptography and spiffe (py-spiffe) from PyPI" >&2
    python3 -m pip install --quiet "PyJWT[crypto]" cryptography "spiffe==0.3.2"
fi

case "${1:-check}" in
regen)
    python3 tests/python/spiffe_bundle_interop.py write tests/vectors/spiffe_bundle
    exit 0
    ;;
check) ;;
*)
    echo "usage: $0 [check|regen]" >&2
    exit 2
    ;;
esac

# shellcheck source=lib.sh
source "$REPO_ROOT/scripts/lib.sh"
if [ -z "${WID_BIN:-}" ]; then
    echo "spiffe-bundle-interop.sh: cargo build --release --locked -p wid" >&2
    cargo build --release --locked --quiet -p wid
    WID_BIN="$(wid_target_dir)/release/wid"
fi

out="$(mktemp -d "${TMPDIR:-/tmp}/spiffe-bundle.XXXXXX")"
trap 'rm -rf "$out"' EXIT
status=0
python3 tests/python/spiffe_bundle_interop.py endpoint "$WID_BIN" || status=$?
python3 tests/python/spiffe_bundle_interop.py write "$out" || status=$?
# The features .ci/run tests remote_jwks with, so its test binary is reused.
WID_PY_SPIFFE_BUNDLE="$out" cargo test --locked --quiet \
    --features "${WID_TEST_FEATURES:-etcd,fuzzing,remote-jwks,transit,vault,consul}" \
    --test remote_jwks spiffe_bundle_written_by_py_spiffe || status=$?
if [ "$status" -eq 0 ]; then
    echo "spiffe-bundle-interop.sh: PASS ($WID_BIN; py-spiffe both ways)"
else
    echo "spiffe-bundle-interop.sh: FAIL (exit $status)" >&2
    exit "$status"
fi
