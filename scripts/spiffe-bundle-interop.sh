#!/usr/bin/env bash
# spiffe-bundle-interop.sh -- SPIFFE federation against py-spiffe
# (tests/python/spiffe_bundle_interop.py) and go-spiffe v2
# (bindings/go/interop/cmd/gospiffebundle), both directions, fresh keys on
# every run:
#
#   1. endpoint: py-spiffe parses `wid serve`'s /spiffe/bundle.json
#      (JwtBundle.parse) and validates our JWT-SVIDs with it; the sequence
#      rises after a rotation (go-spiffe's federation.FetchBundle does the
#      same over HTTPS in bindings/go/interop, scripts/go-tests.sh);
#   2. write: py-spiffe builds a JwtBundle of fresh keys, which is dumped as a
#      SPIFFE bundle with JWT-SVIDs PyJWT signed; tests/remote_jwks.rs
#      (spiffe_bundle_written_by_py_spiffe) reads it with SpiffeBundleSource
#      over loopback HTTP (WID_PY_SPIFFE_BUNDLE) and verifies the tokens;
#   3. write: go-spiffe builds a bundle of fresh keys (spiffebundle.New,
#      AddJWTAuthority, Marshal) with JWT-SVIDs go-jose v4 signed (ES256,
#      ES384, ES512, RS256); tests/remote_jwks.rs
#      (spiffe_bundle_written_by_go_spiffe) reads it the same way
#      (WID_GO_SPIFFE_BUNDLE). The Go program needs the machine's Go in
#      module mode (scripts/lib.sh wid_go_setup) and no C library.
#
#   scripts/spiffe-bundle-interop.sh          # check (builds wid)
#   scripts/spiffe-bundle-interop.sh regen    # rewrite tests/vectors/spiffe_bundle/ (py-spiffe's)
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
wid_go_setup spiffe-bundle-interop.sh
if [ -z "${WID_BIN:-}" ]; then
    echo "spiffe-bundle-interop.sh: cargo build --release --locked -p wid" >&2
    cargo build --release --locked --quiet -p wid
    WID_BIN="$(wid_target_dir)/release/wid"
fi

out="$(mktemp -d "${TMPDIR:-/tmp}/spiffe-bundle.XXXXXX")"
trap 'rm -rf "$out"' EXIT
mkdir "$out/py" "$out/go"
status=0
python3 tests/python/spiffe_bundle_interop.py endpoint "$WID_BIN" || status=$?
python3 tests/python/spiffe_bundle_interop.py write "$out/py" || status=$?
# go-spiffe's bundle: a Go program beside the interop checks, without cgo
# (it does not use the binding).
(cd bindings/go/interop && CGO_ENABLED=0 go run ./cmd/gospiffebundle "$out/go") || status=$?
# The features .ci/run tests remote_jwks with, so its test binary is reused.
# Both tests in one run: each reads the directory its variable names, and
# fails when a file is missing there.
WID_PY_SPIFFE_BUNDLE="$out/py" WID_GO_SPIFFE_BUNDLE="$out/go" cargo test --locked --quiet \
    --features "${WID_TEST_FEATURES:-etcd,fuzzing,remote-jwks,transit,vault,consul}" \
    --test remote_jwks spiffe_bundle_written_by_ || status=$?
if [ "$status" -eq 0 ]; then
    echo "spiffe-bundle-interop.sh: PASS ($WID_BIN; py-spiffe both ways, go-spiffe's bundle read)"
else
    echo "spiffe-bundle-interop.sh: FAIL (exit $status)" >&2
    exit "$status"
fi
