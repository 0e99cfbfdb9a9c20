#!/usr/bin/env bash
# keyring-vectors-check.sh -- verify tests/vectors/keyring.json independently
# of the Rust code:
#   1. recompute every vector with PyPI cryptography (scripts/keyring-vectors.py
#      check; also cross-checks HKDF against a hand-written HKDF-SHA256);
#   2. check the nomad-raw-seed vectors with Go's crypto/ed25519.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

echo "== python: cryptography"
if ! python3 -c 'import cryptography' >/dev/null 2>&1; then
    echo "keyring-vectors-check.sh: installing cryptography from PyPI" >&2
    python3 -m pip install --quiet cryptography
fi

echo "== python: scripts/keyring-vectors.py check"
python3 scripts/keyring-vectors.py check

echo "== python: scripts/token-vector.py check"
python3 scripts/token-vector.py check

echo "== go: crypto/ed25519 nomad-raw-seed check"
scripts/go-deps.sh
# shellcheck source=go-env.sh
source scripts/go-env.sh
wid_go run tests/go/ed25519seed/main.go tests/vectors/keyring.json
