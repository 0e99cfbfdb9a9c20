#!/usr/bin/env bash
# profiles-interop.sh -- the token profiles against independent stacks
# (tests/python/profiles_interop.py): py-spiffe validates our JWT-SVIDs with
# our SPIFFE bundle, PyJWT reads the extra claims, and the committed golden
# tokens verify with PyJWT.
#
#   scripts/profiles-interop.sh                  # builds wid
#   WID_BIN=/path/to/wid scripts/profiles-interop.sh
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

# py-spiffe pinned: the version whose JwtSvid checks were read and tested
# (it compares the SPIFFE ID's trust domain with the bundle's).
if ! python3 -c 'import jwt, cryptography, importlib.metadata as m; assert m.version("spiffe") == "0.3.2"' >/dev/null 2>&1; then
    echo "profiles-interop.sh: installing PyJWT, cryptography and spiffe (py-spiffe) from PyPI" >&2
    python3 -m pip install --quiet "PyJWT[crypto]" cryptography "spiffe==0.3.2"
fi

# shellcheck source=lib.sh
source "$REPO_ROOT/scripts/lib.sh"
if [ -z "${WID_BIN:-}" ]; then
    echo "profiles-interop.sh: cargo build --release --locked -p wid" >&2
    cargo build --release --locked --quiet -p wid
    WID_BIN="$(wid_target_dir)/release/wid"
fi

if python3 tests/python/profiles_interop.py "$WID_BIN"; then
    echo "profiles-interop.sh: PASS ($WID_BIN)"
else
    status=$?
    echo "profiles-interop.sh: FAIL (exit $status)" >&2
    exit "$status"
fi
