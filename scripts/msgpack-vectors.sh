#!/usr/bin/env bash
# msgpack-vectors.sh -- Go side of the msgpack interop check, with both
# generations of Nomad's codec (tests/go/msgpack, module tests/go.mod):
# go-msgpack/v2 as Nomad 1.7+ configures it, and go-msgpack v0.5.5.
#
#   scripts/msgpack-vectors.sh regen
#       Regenerate the committed Go golden vectors: tests/vectors/msgpack/
#       (v0.5.5) and tests/vectors/msgpack-v2/ (v2).
#   scripts/msgpack-vectors.sh check <rust-output-dir>
#       1. Verify the committed vectors are byte-for-byte what each codec
#          writes now.
#       2. Decode the Rust-written *.msgpack files in <rust-output-dir> with
#          both codecs and compare them field by field with the expected
#          values; each codec also decodes the other's bytes.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
# shellcheck source=lib.sh
source "$SCRIPT_DIR/lib.sh"
wid_go_setup msgpack-vectors.sh

usage() {
    echo "usage: $0 regen | check <rust-output-dir>" >&2
    exit 2
}

run_go() {
    (cd "$REPO_ROOT/tests" && go run ./go/msgpack "$@")
}

# write-v0 fills tests/vectors/msgpack, write tests/vectors/msgpack-v2.
generations=("write-v0:msgpack" "write:msgpack-v2")

[ $# -ge 1 ] || usage

case "$1" in
regen)
    [ $# -eq 1 ] || usage
    for g in "${generations[@]}"; do
        run_go "${g%%:*}" "$REPO_ROOT/tests/vectors/${g#*:}"
    done
    ;;
check)
    [ $# -eq 2 ] || usage
    rust_dir="$(cd "$2" && pwd)"
    tmp="$(mktemp -d "${TMPDIR:-/tmp}/msgpack-vectors.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT

    stale=0
    for g in "${generations[@]}"; do
        cmd="${g%%:*}" sub="${g#*:}"
        vector_dir="$REPO_ROOT/tests/vectors/$sub"
        echo "== committed tests/vectors/$sub vs. fresh Go output (go run ./go/msgpack $cmd)"
        mkdir -p "$tmp/$sub"
        run_go "$cmd" "$tmp/$sub" >/dev/null
        for fresh in "$tmp/$sub"/*; do
            name="$(basename "$fresh")"
            committed="$vector_dir/$name"
            if [ ! -f "$committed" ]; then
                echo "--- tests/vectors/$sub/$name (missing)"
                echo "+++ go $cmd/$name"
                stale=1
            elif ! cmp -s "$committed" "$fresh"; then
                echo "--- tests/vectors/$sub/$name (committed)"
                echo "+++ go $cmd/$name (fresh)"
                diff <(od -An -tx1 -v "$committed") <(od -An -tx1 -v "$fresh") || true
                stale=1
            fi
        done
        for committed in "$vector_dir"/*; do
            [ -e "$committed" ] || continue
            name="$(basename "$committed")"
            if [ ! -f "$tmp/$sub/$name" ]; then
                echo "--- tests/vectors/$sub/$name (committed, not written by Go)"
                stale=1
            fi
        done
    done
    if [ "$stale" -ne 0 ]; then
        echo "FAIL: committed vectors differ from Go output; run: scripts/msgpack-vectors.sh regen" >&2
        exit 1
    fi
    echo "ok: committed vectors match Go output (both codecs)"

    echo "== Go decode of Rust-written vectors in $rust_dir (both codecs), and each codec of the other's bytes"
    run_go check "$rust_dir"
    ;;
*)
    usage
    ;;
esac
