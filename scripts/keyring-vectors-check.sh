#!/usr/bin/env bash
# keyring-vectors-check.sh -- verify tests/vectors/keyring.json (Ed25519) and
# tests/vectors/p256.json (ES256) independently of the Rust code:
#   1. recompute every vector with PyPI cryptography (scripts/keyring-vectors.py
#      check; also cross-checks HKDF against a hand-written HKDF-SHA256 and
#      every P-256 point against hand-written curve arithmetic);
#   2. regenerate the P-256 file and diff it against the committed one;
#   3. check the nomad-raw-seed vectors with Go's crypto/ed25519.
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

echo "== python: regenerate tests/vectors/p256.json and diff"
p256_new="$(mktemp)"
trap 'rm -f "$p256_new"' EXIT
python3 scripts/keyring-vectors.py print-p256 >"$p256_new"
if ! diff -u tests/vectors/p256.json "$p256_new"; then
    echo "keyring-vectors-check.sh: tests/vectors/p256.json differs from a fresh" \
        "scripts/keyring-vectors.py print-p256 (regenerate with: scripts/keyring-vectors.py generate)" >&2
    exit 1
fi
echo "tests/vectors/p256.json: identical to a fresh regeneration"

echo "== python: scripts/token-vector.py check"
python3 scripts/token-vector.py check

echo "== go: crypto/ed25519 nomad-raw-seed check"
# shellcheck source=lib.sh
source scripts/lib.sh
wid_go_setup keyring-vectors-check.sh
(cd tests && go run ./go/ed25519seed vectors/keyring.json)
