#!/usr/bin/env bash
# Builds every fuzz target on the stable toolchain (cargo-fuzz with
# `-s none`: sancov instrumentation without a sanitizer, which needs nightly)
# and runs each for FUZZ_SECONDS (default 60) from its committed corpus,
# FUZZ_JOBS targets at a time (default: the CPU count, at most 4).
# Any crash, panic, timeout (-timeout) or allocation beyond the limits
# (-malloc_limit_mb / -rss_limit_mb) fails. New inputs go to a temporary
# directory, never into the committed corpus.
#
#   scripts/fuzz.sh                 all targets, FUZZ_SECONDS each
#   scripts/fuzz.sh verify ffi      some targets
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib.sh
source "$root/scripts/lib.sh"   # wid_target_dir
cd "$root/fuzz"
seconds="${FUZZ_SECONDS:-60}"
CARGO_FUZZ_VERSION=0.13.1

installed="$(cargo fuzz --version 2>/dev/null || true)"
if [[ "$installed" != *"$CARGO_FUZZ_VERSION"* ]]; then
    echo "fuzz.sh: installing cargo-fuzz $CARGO_FUZZ_VERSION" >&2
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked --quiet
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo fuzz list)
fi
for t in "${targets[@]}"; do cargo fuzz build -s none "$t"; done
work="$(mktemp -d "${TMPDIR:-/tmp}/wid-fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT
summary=()
# Targets run FUZZ_JOBS at a time (default: one per CPU, at most 4), each
# for the full FUZZ_SECONDS: libFuzzer is single-threaded, so on a 2-core
# machine two at a time take half the wall time for the same fuzzing.
jobs="${FUZZ_JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}"
[ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
[ "$jobs" -le 4 ] || jobs=4
fuzz_one() { # target -> $work/<t>.ok with its summary line, or the failure's tail on stderr
    local t="$1" dict=() log runs cov
    mkdir -p "$work/$t"
    case "$t" in jwt_decode | verify | verify_algorithms | verify_proof | jwks_import) dict=(-dict=dict/jwt.dict) ;; esac
    log="$work/$t.log"
    if ! cargo fuzz run -s none "$t" "$work/$t" "corpus/$t" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
        -print_final_stats=1 "${dict[@]}" >"$log" 2>&1; then
        tail -40 "$log" >&2
        echo "fuzz.sh: $t FAILED; the crashing input is under fuzz/artifacts/$t/" >&2
        return 1
    fi
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
    cov="$(grep -o 'cov: [0-9]*' "$log" | tail -1)"
    echo "$t: ${runs:-?} runs, ${cov:-cov: ?}" > "$work/$t.ok"
}
failed=0
i=0
while [ "$i" -lt "${#targets[@]}" ]; do
    batch=("${targets[@]:i:jobs}")
    echo "== fuzz ${batch[*]} for ${seconds}s (${#batch[@]} at a time)"
    pids=()
    for t in "${batch[@]}"; do
        fuzz_one "$t" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
    [ "$failed" = 0 ] || exit 1
    i=$((i + jobs))
done
for t in "${targets[@]}"; do summary+=("$(cat "$work/$t.ok")"); done
# Leaks and memory errors: the fuzzers have no sanitizer on stable, so replay the
# committed corpora (plus this run's new inputs) under valgrind.
cd "$root"
cargo build --release --locked --quiet -p workload-identity-ffi --features fuzzing --example replay_corpus
command -v valgrind >/dev/null || { echo "fuzz.sh: valgrind is required" >&2; exit 2; }
mkdir -p "$work/all"
for t in "${targets[@]}"; do
    mkdir -p "$work/all/$t"
    cp fuzz/corpus/"$t"/* "$work/all/$t/" 2>/dev/null || true
    # a sample of what this run found, to keep the valgrind pass short
    found=("$work/$t"/*)
    if [ -e "${found[0]}" ]; then
        cp "${found[@]:0:200}" "$work/all/$t/"
    fi
done
# The replay reads every target's directory, fuzzed this run or not.
mapfile -t all_targets < <(cd fuzz && cargo fuzz list)
for t in "${all_targets[@]}"; do mkdir -p "$work/all/$t"; done
valgrind --quiet --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite \
    --error-exitcode=1 "$(wid_target_dir)/release/examples/replay_corpus" "$work/all" >/dev/null
summary+=("valgrind: corpus replay clean (no memory errors, no definite leaks)")
printf '%s\n' "${summary[@]}"
echo "fuzz.sh: ${#targets[@]} targets fuzzed ${seconds}s each, no crash"
