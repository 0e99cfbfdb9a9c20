#!/usr/bin/env bash
# pyjwt-interop.sh -- check the C ABI against PyJWT, an independent JWT stack
# (tests/python/pyjwt_interop.py): C-issued tokens verify with PyJWT from the
# exported JWKS, and PyJWT-signed tokens verify through wid_verify. Then proof
# of possession through examples/pop_interop.rs (the Rust API, not the C ABI):
# our WITs and WPTs verify with PyJWT, and PyJWT's WPTs with verify_proof.
#
#   scripts/pyjwt-interop.sh                         # builds the library
#   WID_LIB_DIR=/path/with/the/so scripts/pyjwt-interop.sh
#   WID_POP_INTEROP=/path/to/pop_interop scripts/pyjwt-interop.sh  # else built here
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

if ! python3 -c 'import jwt, cryptography' >/dev/null 2>&1; then
    echo "pyjwt-interop.sh: installing PyJWT and cryptography from PyPI" >&2
    python3 -m pip install --quiet "PyJWT[crypto]" cryptography
fi

# shellcheck source=lib.sh
source "$REPO_ROOT/scripts/lib.sh"
wid_find_lib pyjwt-interop.sh
LIB="$WID_LIB/libworkload_identity.so"
if [ -z "${WID_POP_INTEROP:-}" ]; then
    # The library's features, so the build does not replace the C library
    # wid_find_lib just built with another set.
    echo "pyjwt-interop.sh: cargo build --release --locked $WID_LIB_FEATURES --example pop_interop" >&2
    # shellcheck disable=SC2086
    cargo build --release --locked --quiet $WID_LIB_FEATURES --example pop_interop
    WID_POP_INTEROP="$(wid_target_dir)/release/examples/pop_interop"
fi

if python3 tests/python/pyjwt_interop.py "$LIB" "$WID_POP_INTEROP"; then
    echo "pyjwt-interop.sh: PASS ($LIB)"
else
    status=$?
    echo "pyjwt-interop.sh: FAIL (exit $status, $LIB)" >&2
    exit "$status"
fi
