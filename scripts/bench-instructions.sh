#!/usr/bin/env bash
# Instruction counts per operation, measured with valgrind (repeatable whatever
# else the machine is doing), for the speed targets in BENCHMARKS.md.
# Each row runs examples/instructions.rs (ffi_verify: the C ABI crate's
# ffi/examples/c_instructions.rs) with N calls, and callgrind counts only the
# instructions inside its `measured` function (--toggle-collect): divided by N,
# the cost of one call, with no setup in it (the setup's count varies from one
# process to the next by up to a million instructions).
#
#   scripts/bench-instructions.sh              every row
#   scripts/bench-instructions.sh es256_verify some rows
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v valgrind >/dev/null || { echo "bench-instructions: valgrind is required" >&2; exit 2; }
# shellcheck source=lib.sh
source scripts/lib.sh
cargo build --release --locked --quiet --example instructions
cargo build --release --locked --quiet -p workload-identity-ffi --example c_instructions
examples="$(wid_target_dir)/release/examples"
n=100

irefs() { # row calls -> total instructions
    local bin="$examples/instructions"
    case "$1" in ffi_*) bin="$examples/c_instructions" ;; esac
    valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect='*::measured' \
        "$bin" "$1" "$2" 2>&1 >/dev/null \
        | sed -n 's/.*I *refs: *//p' | tr -d ,
}

printf '%-16s %14s\n' row instructions/op
rows=(verify_strict sign ed_raw_sign verify ffi_verify issue cache_hit batch64
    es256_raw_sign es256_issue es256_raw_verify es256_verify
    rs256_raw_sign rs256_issue rs256_raw_verify rs256_verify
    iss_verify trust_verify iss_cache_hit trust_cache_hit trust1_cache_hit trust8_cache_hit
    iss_batch64 trust_batch64 ffi_issue ffi_native_issue ffi_raw_sign)
[ $# -gt 0 ] && rows=("$@")
for row in "${rows[@]}"; do
    per=$(( $(irefs "$row" "$n") / n ))
    case "$row" in *batch64) per=$(( per / 64 )) ;; esac
    printf '%-16s %14s\n' "$row" "$per"
done
