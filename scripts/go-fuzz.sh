#!/usr/bin/env bash
# go-fuzz.sh -- runs every Go fuzz target of the binding (`go test -fuzz`:
# bindings/go/wid/fuzz_test.go, what the binding decodes from the C library
# and the request encoding round trip) for WID_GO_FUZZTIME each (default
# 150000x: that many executions), one at a time, from its committed seed corpus
# (bindings/go/wid/testdata/fuzz/<target>/). New inputs go to Go's cache,
# never into the tree; a failing input is written to testdata/fuzz/<target>/
# by Go (that is how it is replayed: `go test -run <target>/<file> ./wid`)
# and printed here.
#
#   scripts/go-fuzz.sh                  all targets
#   scripts/go-fuzz.sh FuzzClaimsJSON   some
#   WID_LIB_DIR=dir                     use an already built library (scripts/lib.sh)
#
# The default budget is a count, not a duration: with a duration, Go 1.26's
# fuzz coordinator can report "context deadline exceeded" as a failure when
# the time runs out while a starved worker is mid-call (golang/go#75804,
# fixed in Go 1.27), which a loaded 2-core CI machine hits. A count has no
# deadline to race; a slower machine only takes longer.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
# shellcheck source=lib.sh
source "$SCRIPT_DIR/lib.sh"
wid_go_setup go-fuzz.sh
wid_find_lib go-fuzz.sh
export CGO_ENABLED=1
export CGO_CFLAGS="-g -O2 -I$WID_INC"
export CGO_LDFLAGS="$WID_LIB/libworkload_identity.a -lpthread -ldl -lm"
fuzztime="${WID_GO_FUZZTIME:-150000x}"
cd "$REPO_ROOT/bindings/go"

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(go test -list '^Fuzz' ./wid | grep '^Fuzz')
fi
[ ${#targets[@]} -gt 0 ] || { echo "go-fuzz.sh: no fuzz targets in ./wid" >&2; exit 1; }

summary=()
for t in "${targets[@]}"; do
    seeds="$(find "wid/testdata/fuzz/$t" -type f 2>/dev/null | wc -l | tr -d ' ')"
    [ "$seeds" -gt 0 ] || { echo "go-fuzz.sh: $t has no committed seed corpus (wid/testdata/fuzz/$t)" >&2; exit 1; }
    echo "== $t for $fuzztime ($seeds seeds)"
    log="$(mktemp "${TMPDIR:-/tmp}/wid-go-fuzz.XXXXXX")"
    if ! go test -run '^$' -fuzz "^$t\$" -fuzztime "$fuzztime" ./wid >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        echo "go-fuzz.sh: $t failed; the input Go saved:" >&2
        (cd "$REPO_ROOT" && git status --short -- "bindings/go/wid/testdata/fuzz/$t") >&2 || true
        exit 1
    fi
    # go test -fuzz's last progress line: "fuzz: elapsed: 15s, execs: 123 (8/sec), new interesting: 4 (total: 12)"
    last="$(grep '^fuzz: elapsed' "$log" | tail -1)"
    rm -f "$log"
    summary+=("$t: ${last#fuzz: }")
done
printf 'go-fuzz.sh: %s\n' "${summary[@]}"
