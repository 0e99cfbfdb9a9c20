#!/usr/bin/env bash
# msgpack-vectors.sh -- Go side of the msgpack interop check.
#
#   scripts/msgpack-vectors.sh regen
#       Regenerate the committed Go golden vectors in tests/vectors/msgpack/.
#   scripts/msgpack-vectors.sh check <rust-output-dir>
#       1. Verify the committed vectors are byte-for-byte what Go writes now.
#       2. Decode the Rust-written *.msgpack files in <rust-output-dir> with
#          go-msgpack and compare them field by field with the expected values.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
"$SCRIPT_DIR/go-deps.sh"
# shellcheck source=go-env.sh
source "$SCRIPT_DIR/go-env.sh"

GO_PROG="$REPO_ROOT/tests/go/msgpack/main.go"
VECTOR_DIR="$REPO_ROOT/tests/vectors/msgpack"

usage() {
    echo "usage: $0 regen | check <rust-output-dir>" >&2
    exit 2
}

run_go() {
    (cd "$REPO_ROOT" && wid_go run "$GO_PROG" "$@")
}

[ $# -ge 1 ] || usage

case "$1" in
regen)
    [ $# -eq 1 ] || usage
    run_go write "$VECTOR_DIR"
    ;;
check)
    [ $# -eq 2 ] || usage
    rust_dir="$(cd "$2" && pwd)"
    tmp="$(mktemp -d "${TMPDIR:-/tmp}/msgpack-vectors.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT

    echo "== committed vectors vs. fresh Go output"
    run_go write "$tmp" >/dev/null
    stale=0
    for fresh in "$tmp"/*; do
        name="$(basename "$fresh")"
        committed="$VECTOR_DIR/$name"
        if [ ! -f "$committed" ]; then
            echo "--- tests/vectors/msgpack/$name (missing)"
            echo "+++ go write/$name"
            stale=1
        elif ! cmp -s "$committed" "$fresh"; then
            echo "--- tests/vectors/msgpack/$name (committed)"
            echo "+++ go write/$name (fresh)"
            diff <(od -An -tx1 -v "$committed") <(od -An -tx1 -v "$fresh") || true
            stale=1
        fi
    done
    for committed in "$VECTOR_DIR"/*; do
        [ -e "$committed" ] || continue
        name="$(basename "$committed")"
        if [ ! -f "$tmp/$name" ]; then
            echo "--- tests/vectors/msgpack/$name (committed, not written by Go)"
            stale=1
        fi
    done
    if [ "$stale" -ne 0 ]; then
        echo "FAIL: committed vectors differ from Go output; run: scripts/msgpack-vectors.sh regen" >&2
        exit 1
    fi
    echo "ok: committed vectors match Go output"

    echo "== Go decode of Rust-written vectors in $rust_dir"
    run_go check "$rust_dir"
    ;;
*)
    usage
    ;;
esac
